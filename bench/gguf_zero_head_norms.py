#!/usr/bin/env python3
"""bench/gguf_zero_head_norms.py FILE: zeroes output_norm and the MTP block's shared_head_norm of a GGUF file in place:
every logit of the target and of its MTP head becomes 0, so both pick token 0 and
every draft is accepted (the mechanism at 100% acceptance; issue 12's benchmark)."""
import struct, sys

def main(path):
    f = open(path, 'r+b')
    def rd(fmt):
        return struct.unpack('<' + fmt, f.read(struct.calcsize('<' + fmt)))
    def rstr():
        (n,) = rd('Q'); return f.read(n).decode()
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    def skip(t):
        if t == 8: rstr()
        elif t == 9:
            et, n = rd('IQ')
            for _ in range(n): skip(et)
        else: f.read(sizes[t])
    assert f.read(4) == b'GGUF'
    (ver,) = rd('I'); n_t, n_kv = rd('QQ')
    align = 32
    for _ in range(n_kv):
        key = rstr(); (t,) = rd('I')
        if key == 'general.alignment' and t == 4: (align,) = rd('I')
        else: skip(t)
    infos = []
    for _ in range(n_t):
        name = rstr(); (nd,) = rd('I'); dims = rd('Q' * nd); (typ,) = rd('I'); (off,) = rd('Q')
        infos.append((name, dims, typ, off))
    base = (f.tell() + align - 1) // align * align
    for name, dims, typ, off in infos:
        if name.endswith('output_norm.weight') or name.endswith('shared_head_norm.weight'):
            assert typ == 0, (name, typ)  # F32
            n = 1
            for d in dims: n *= d
            f.seek(base + off); f.write(b'\0' * 4 * n)
            print('zeroed', name, n)
    f.close()

main(sys.argv[1])
