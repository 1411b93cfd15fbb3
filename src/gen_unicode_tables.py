#!/usr/bin/env python3
"""Generates src/unicode_tables.c from the Unicode Character Database.

    python3 src/gen_unicode_tables.py /usr/share/unicode > src/unicode_tables.c

The folder must hold UnicodeData.txt, PropList.txt and CaseFolding.txt
(Debian: apt-get install unicode-data, which installs Unicode 15.0.0 under
/usr/share/unicode).  Three compact tables come out:

  unicode_category_runs   general category as runs over 0..0x10FFFF: each
                          entry is the first code point of a run and the
                          category every code point up to the next run has
                          (code points UnicodeData.txt omits are Cn)
  unicode_white_space     the White_Space property (PropList.txt), which is
                          what \\s means in the Oniguruma and Rust regex
                          engines that tokenizer.json patterns were made for
  unicode_fold_runs       simple case folding (CaseFolding.txt statuses C and
                          S) as runs of code points with a common stride and
                          offset, for the (?i:...) parts of the patterns
"""
import os
import re
import sys

MAX_CP = 0x10FFFF


def read_lines(folder, name):
    with open(os.path.join(folder, name), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                yield line


def unicode_version(folder):
    with open(os.path.join(folder, "PropList.txt"), encoding="utf-8") as f:
        match = re.search(r"PropList-([0-9.]+)\.txt", f.readline())
    if match is None:
        sys.exit("PropList.txt: no version on its first line")
    return match.group(1)


def categories(folder):
    """Category per code point as a list of (first, category) runs."""
    cat = ["Cn"] * (MAX_CP + 1)
    range_first = None
    for line in read_lines(folder, "UnicodeData.txt"):
        fields = line.split(";")
        cp, name, gc = int(fields[0], 16), fields[1], fields[2]
        if name.endswith(", First>"):
            range_first = cp
            continue
        if name.endswith(", Last>"):
            for c in range(range_first, cp + 1):
                cat[c] = gc
            range_first = None
            continue
        cat[cp] = gc
    runs = []
    for cp in range(MAX_CP + 1):
        if not runs or runs[-1][1] != cat[cp]:
            runs.append((cp, cat[cp]))
    return runs


def white_space(folder):
    ranges = []
    for line in read_lines(folder, "PropList.txt"):
        cps, prop = [s.strip() for s in line.split(";")]
        if prop != "White_Space":
            continue
        lo, _, hi = cps.partition("..")
        ranges.append((int(lo, 16), int(hi or lo, 16)))
    ranges.sort()
    merged = []
    for lo, hi in ranges:
        if merged and merged[-1][1] + 1 == lo:
            merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return merged


def fold_runs(folder):
    pairs = []
    for line in read_lines(folder, "CaseFolding.txt"):
        fields = [s.strip() for s in line.split(";")]
        if fields[1] in ("C", "S"):
            pairs.append((int(fields[0], 16), int(fields[2], 16)))
    pairs.sort()
    runs = []  # [first, last, stride, delta]
    for src, dst in pairs:
        delta = dst - src
        if runs:
            first, last, stride, run_delta = runs[-1]
            gap = src - last
            if run_delta == delta and (gap == stride or (first == last and gap in (1, 2))):
                runs[-1] = [first, src, gap, delta]
                continue
        runs.append([src, src, 1, delta])
    return runs


def emit(folder):
    version = unicode_version(folder)
    cat_runs = categories(folder)
    spaces = white_space(folder)
    folds = fold_runs(folder)
    out = []
    out.append("/*")
    out.append(" * unicode_tables.c — GENERATED, do not edit.  Unicode %s." % version)
    out.append(" *")
    out.append(" * Made by src/gen_unicode_tables.py from the Unicode Character Database")
    out.append(" * (Debian package unicode-data, /usr/share/unicode):")
    out.append(" *     python3 src/gen_unicode_tables.py /usr/share/unicode > src/unicode_tables.c")
    out.append(" * The script's docstring says what each table holds; unicode.h declares them.")
    out.append(" */")
    out.append('#include "unicode.h"')
    out.append("")
    out.append("#define R(first, cat) ((uint32_t)(first) << UNICODE_RUN_SHIFT | UCAT_##cat)")
    out.append("")
    out.append("const uint32_t unicode_category_runs[] = {")
    line = "   "
    for first, gc in cat_runs:
        item = " R(0x%04X, %s)," % (first, gc)
        if len(line) + len(item) > 100:
            out.append(line)
            line = "   "
        line += item
    out.append(line)
    out.append("};")
    out.append("const size_t unicode_category_run_count = sizeof unicode_category_runs / sizeof unicode_category_runs[0];")
    out.append("")
    out.append("#undef R")
    out.append("")
    out.append("const unicode_range unicode_white_space[] = {")
    for lo, hi in spaces:
        out.append("    {0x%04X, 0x%04X}," % (lo, hi))
    out.append("};")
    out.append("const size_t unicode_white_space_count = sizeof unicode_white_space / sizeof unicode_white_space[0];")
    out.append("")
    out.append("/* {first, last, stride, delta}: first, first + stride, ... last fold to cp + delta. */")
    out.append("const unicode_fold_run unicode_fold_runs[] = {")
    for first, last, stride, delta in folds:
        out.append("    {0x%04X, 0x%04X, %d, %d}," % (first, last, stride, delta))
    out.append("};")
    out.append("const size_t unicode_fold_run_count = sizeof unicode_fold_runs / sizeof unicode_fold_runs[0];")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gen_unicode_tables.py UCD_FOLDER > src/unicode_tables.c")
    sys.stdout.write(emit(sys.argv[1]))
