/*
 * test_chat.c — chat templates: every rendering in ../shared/chat/goldens.json
 * (jinja2 as transformers configures it) reproduced byte for byte; Jinja
 * semantics against outputs recorded from jinja2 3.1; error messages with
 * line and column; limits against hostile templates.
 */
#include "gguf_write.h"
#include "hydra.h"
#include "test.h"
#include "util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* strftime_now's fixed time in the goldens: 2024-07-26 00:00:00. */
#define GOLDEN_TIME 1721952000

/* ------------------------------------------------------------ helpers */

/* Renders a template over JSON messages (NULL: []) with params. */
static hydra_status render(const char *text, const char *messages_json, const hydra_chat_params *params, char **out)
{
    hydra_chat_template *tmpl;
    *out = NULL;
    hydra_status st = hydra_chat_template_new(text, &tmpl);
    if (st != HYDRA_OK)
        return st;
    st = hydra_chat_apply_json(tmpl, messages_json ? messages_json : "[]", params, out, NULL);
    hydra_chat_template_free(tmpl);
    return st;
}

/* bytes[0..n) with \n, \t, \r, " and \\ escaped, into out (truncated). */
static void escape_into(char *out, size_t size, const char *bytes, size_t n)
{
    size_t o = 0;
    for (size_t k = 0; k < n && o + 5 < size; k++) {
        char c = bytes[k];
        const char *esc = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : c == '"' ? "\\\"" : c == '\\' ? "\\\\" : NULL;
        if (esc) {
            memcpy(out + o, esc, 2);
            o += 2;
        } else {
            out[o++] = c;
        }
    }
    out[o] = '\0';
}

/* Writes "first difference at byte N" with both strings around it. */
static void describe_difference(const char *got, size_t got_len, const char *want, size_t want_len, char *msg,
                                size_t size)
{
    size_t k = 0;
    while (k < got_len && k < want_len && got[k] == want[k])
        k++;
    size_t from = k > 40 ? k - 40 : 0;
    char got_text[256], want_text[256];
    escape_into(got_text, sizeof got_text, got + from, (got_len > k + 40 ? k + 40 : got_len) - from);
    escape_into(want_text, sizeof want_text, want + from, (want_len > k + 40 ? k + 40 : want_len) - from);
    snprintf(msg, size,
             "first difference at byte %zu (lengths %zu vs %zu), from byte %zu:\n      got:      \"%s\"\n"
             "      expected: \"%s\"",
             k, got_len, want_len, from, got_text, want_text);
}

/* A string item of a cJSON object, or NULL. */
static const char *json_str(const cJSON *obj, const char *key)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(item) ? item->valuestring : NULL;
}

typedef struct golden_case {
    const char *template_file;
    const char *conversation;
    const char *expected;
    hydra_chat_params params;
    char *tools_json, *extra_json, *messages_json; /* owned */
} golden_case;

static void golden_case_read(const cJSON *c, golden_case *g)
{
    memset(g, 0, sizeof *g);
    g->template_file = json_str(c, "template");
    g->conversation = json_str(c, "conversation");
    g->expected = json_str(c, "expected");
    g->params = hydra_chat_default_params();
    g->params.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt"));
    g->params.bos_token = json_str(c, "bos_token");
    g->params.eos_token = json_str(c, "eos_token");
    g->params.fixed_time = true;
    g->params.fixed_now = GOLDEN_TIME;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(c, "tools");
    if (tools && !cJSON_IsNull(tools))
        g->tools_json = cJSON_PrintUnformatted(tools);
    const cJSON *kwargs = cJSON_GetObjectItemCaseSensitive(c, "kwargs");
    if (kwargs && cJSON_GetArraySize(kwargs) > 0)
        g->extra_json = cJSON_PrintUnformatted(kwargs);
    g->messages_json = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(c, "messages"));
    g->params.tools_json = g->tools_json;
    g->params.extra_json = g->extra_json;
}

static void golden_case_free(golden_case *g)
{
    free(g->tools_json);
    free(g->extra_json);
    free(g->messages_json);
}

static char *read_template(const char *file)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/chat/%s", test_shared_dir(), file);
    size_t size;
    uint8_t *bytes = util_read_file(path, &size);
    if (bytes == NULL)
        return NULL;
    char *text = realloc(bytes, size + 1);
    if (text)
        text[size] = '\0';
    return text;
}

static cJSON *read_goldens(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/chat/goldens.json", test_shared_dir());
    return util_read_json(path);
}

/* Renders one golden case with `apply`; on mismatch writes why into msg. */
typedef hydra_status (*apply_fn)(const hydra_chat_template *tmpl, const cJSON *c, const golden_case *g, char **out,
                                 size_t *len);

static bool check_case(const cJSON *c, apply_fn apply, char *msg, size_t size)
{
    golden_case g;
    golden_case_read(c, &g);
    bool ok = false;
    char *text = read_template(g.template_file);
    hydra_chat_template *tmpl = NULL;
    char *out = NULL;
    size_t len = 0;
    if (text == NULL || g.expected == NULL || g.messages_json == NULL) {
        snprintf(msg, size, "cannot read the case or its template");
    } else if (hydra_chat_template_new(text, &tmpl) != HYDRA_OK) {
        snprintf(msg, size, "template does not parse: %s", hydra_last_error());
    } else if (apply(tmpl, c, &g, &out, &len) != HYDRA_OK) {
        snprintf(msg, size, "render failed: %s", hydra_last_error());
    } else if (len != strlen(g.expected) || memcmp(out, g.expected, len) != 0) {
        describe_difference(out, len, g.expected, strlen(g.expected), msg, size);
    } else {
        ok = true;
    }
    free(out);
    hydra_chat_template_free(tmpl);
    free(text);
    golden_case_free(&g);
    return ok;
}

/* Runs the cases `wanted` accepts (all when NULL) through apply; returns
 * how many render exactly, *total how many ran, failure the first miss. */
static int run_goldens(apply_fn apply, bool (*wanted)(const cJSON *c), const char *label, int *total, char *failure,
                       size_t size)
{
    *total = 0;
    snprintf(failure, size, "cannot read goldens.json");
    cJSON *goldens = read_goldens();
    if (goldens == NULL)
        return -1;
    failure[0] = '\0';
    int exact = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(goldens, "cases"))
    {
        if (wanted && !wanted(c))
            continue;
        ++*total;
        char msg[1024];
        if (check_case(c, apply, msg, sizeof msg))
            exact++;
        else if (failure[0] == '\0')
            snprintf(failure, size, "%s, conversation %s, add_generation_prompt %s: %s", json_str(c, "template"),
                     json_str(c, "conversation"),
                     cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt")) ? "true" : "false",
                     msg);
    }
    printf("  chat goldens (%s): %d/%d exact\n", label, exact, *total);
    cJSON_Delete(goldens);
    return exact;
}

#define CHECK_GOLDENS(apply, wanted, label, expected_total)                   \
    do {                                                                      \
        int total_;                                                           \
        char failure_[1536];                                                  \
        int exact_ = run_goldens(apply, wanted, label, &total_, failure_, sizeof failure_); \
        if (exact_ != total_ || total_ != (expected_total))                   \
            FAIL("%d/%d exact (expected %d cases); first failure: %s", exact_, total_, expected_total, failure_); \
    } while (0)

/* ------------------------------------------------------------- goldens */

static hydra_status apply_json(const hydra_chat_template *tmpl, const cJSON *c, const golden_case *g, char **out,
                               size_t *len)
{
    (void)c;
    return hydra_chat_apply_json(tmpl, g->messages_json, &g->params, out, len);
}

TEST(chat_goldens_exact)
{
    REQUIRE_SHARED();
    CHECK_GOLDENS(apply_json, NULL, "messages as JSON", 132);
}

/* The same conversations through hydra_chat_message: the reasoning field
 * (reasoning_content, or thinking for gpt-oss) goes in reasoning_content. */
static hydra_status apply_struct(const hydra_chat_template *tmpl, const cJSON *c, const golden_case *g, char **out,
                                 size_t *len)
{
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(c, "messages");
    int n = cJSON_GetArraySize(messages);
    hydra_chat_message *m = calloc((size_t)n + 1, sizeof *m);
    char **calls = calloc((size_t)n + 1, sizeof *calls);
    hydra_status st = HYDRA_ERR_NOMEM;
    if (m && calls) {
        for (int k = 0; k < n; k++) {
            const cJSON *msg = cJSON_GetArrayItem(messages, k);
            m[k].role = json_str(msg, "role");
            m[k].content = json_str(msg, "content");
            m[k].reasoning_content = json_str(msg, "reasoning_content");
            if (m[k].reasoning_content == NULL)
                m[k].reasoning_content = json_str(msg, "thinking");
            m[k].tool_call_id = json_str(msg, "tool_call_id");
            m[k].name = json_str(msg, "name");
            const cJSON *tc = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
            if (tc)
                m[k].tool_calls_json = calls[k] = cJSON_PrintUnformatted(tc);
        }
        st = hydra_chat_apply(tmpl, m, (size_t)n, &g->params, out, len);
    }
    for (int k = 0; calls && k < n; k++)
        free(calls[k]);
    free(calls);
    free(m);
    return st;
}

TEST(chat_goldens_message_structs)
{
    REQUIRE_SHARED();
    CHECK_GOLDENS(apply_struct, NULL, "hydra_chat_message", 132);
}

/* ----------------------------------------------------------- semantics */

/* Each template rendered by jinja2 3.1 configured as in goldens.json
 * (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
 * transformers' tojson, strftime_now at 2024-07-26); `expected` is its
 * output, recorded once.  vars: extra variables as JSON. */
static const struct semantics_case {
    const char *name, *text, *vars, *expected;
} semantics_cases[] = {
    {"ws_trim_lstrip",
     "<ul>\n  {% for x in xs %}\n  <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n",
     "{\"xs\": [1, 2]}",
     "<ul>\n  <li>1</li>\n  <li>2</li>\n</ul>"},
    {"ws_minus",
     "a  \n  {%- if true -%}  \n  b  {{- ' c ' -}}  d\n{%- endif %}\n",
     NULL,
     "ab c d"},
    {"ws_plus",
     "a\n  {%+ if true +%}\nb\n  {% endif %}\n",
     NULL,
     "a\n  \nb\n"},
    {"ws_comment",
     "x\n  {# note #}\ny {#- tight -#} z\n{# end #}\n",
     NULL,
     "x\nyz\n"},
    {"ws_var_no_trim",
     "{{ 1 }}\n{{ 2 }}\n",
     NULL,
     "1\n2"},
    {"ws_raw",
     "{% raw %}{{ not evaluated }}{% endraw %}|{%- raw -%} x {%- endraw -%} |",
     NULL,
     "{{ not evaluated }}|x|"},
    {"ws_crlf",
     "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n",
     NULL,
     "a\nb\nc"},
    {"ws_trailing_newlines",
     "x\n\n",
     NULL,
     "x\n"},
    {"ws_nested_braces",
     "{{ {'a': {'b': 1}} }}|{{ {'k': [1, {'z': 2}]}['k'][1]['z'] }}",
     NULL,
     "{'a': {'b': 1}}|2"},
    {"loop_vars",
     "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.cycle('o', 'e') }};{% endfor %}",
     NULL,
     "10TrueFalse332[|b]o;21FalseFalse321[a|c]e;32FalseTrue310[b|]o;"},
    {"loop_else_filter",
     "{% for x in xs if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}",
     "{\"xs\": [1, 2, 3, 0, 5]}",
     "2:1/3 3:2/3 5:3/3 |empty"},
    {"loop_break_continue",
     "{% for x in range(10) %}{% if x is odd %}{% continue %}{% endif %}{% if x > 6 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     NULL,
     "0246"},
    {"loop_nested_depth",
     "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.depth }}{{ loop.index }} {% endfor %}{{ loop.depth }}|{% endfor %}",
     NULL,
     "1x11 1y12 1|2x11 2y12 1|"},
    {"loop_unpack_dict",
     "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for k, v in d|items %}{{ v }}{% endfor %}",
     "{\"d\": {\"b\": 1, \"a\": [2], \"c\": null}}",
     "b=1;a=[2];c=None;bac1[2]None"},
    {"scope_loop_set",
     "{% set x = 1 %}{% for i in [5, 6] %}{% set x = x + i %}{{ x }},{% endfor %}{{ x }}",
     NULL,
     "6,7,1"},
    {"scope_namespace",
     "{% set ns = namespace(total=0, names=[]) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% set ns.names = ns.names + [i|string] %}{% endfor %}{{ ns.total }} {{ ns.names|join('-') }} {{ ns.missing is defined }}",
     NULL,
     "6 1-2-3 False"},
    {"scope_if_no_scope",
     "{% if true %}{% set y = 'set in if' %}{% endif %}{{ y }}",
     NULL,
     "set in if"},
    {"scope_set_block",
     "{% set block %}  a {{ 1 + 1 }}\n{% endset %}[{{ block }}]",
     NULL,
     "[  a 2\n]"},
    {"scope_tuple_set",
     "{% set a, b = 1, 'two' %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}",
     NULL,
     "1two(1, 2)"},
    {"macro_defaults",
     "{% macro greet(name, greeting='Hello', punct=none) %}{{ greeting }}, {{ name }}{{ punct or '!' }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bo', punct='?') }} {{ greet(greeting='Hi', name='Cy') }}",
     NULL,
     "Hello, Ann! Hello, Bo? Hi, Cy!"},
    {"macro_recursion",
     "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1)|int) }}{% endif %}{% endmacro %}{{ fact(10) }}",
     NULL,
     "3628800"},
    {"macro_returns_string",
     "{% macro m() %}  x  {% endmacro %}[{{ m()|trim }}]{{ m().startswith('  x') }}{{ m() is string }}",
     NULL,
     "[x]TrueTrue"},
    {"macro_sees_globals",
     "{% macro m() %}{{ g }}-{{ later }}{% endmacro %}{% set later = 'L' %}{{ m() }}",
     "{\"g\": \"G\"}",
     "G-L"},
    {"slices",
     "{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::-1] }}{{ xs[::2] }}{{ xs[-2] }}{{ xs[10] is defined }}{{ xs[1:100] }}{{ xs[-100:1] }}",
     "{\"xs\": [1, 2, 3, 4]}",
     "[2, 3, 4][1, 2, 3][4, 3, 2, 1][1, 3]3False[2, 3, 4][1]"},
    {"string_slices",
     "{{ s[::-1] }}|{{ s[1:4] }}|{{ s[-1] }}|{{ s|length }}|{{ s[:-1] }}",
     "{\"s\": \"h\\u00e9llo \\ud83d\\udc4b\"}",
     "👋 olléh|éll|👋|7|héllo "},
    {"getattr_getitem",
     "{{ d.items is defined }}{{ d['items'] }}{{ d.keys()|list }}{{ d.get('nope', 'dflt') }}{{ d.get('nope') }}{{ d.x.y is defined }}{{ 'abc'.nope is defined }}{{ none.x is defined }}{{ d['x'] }}",
     "{\"d\": {\"items\": 7, \"x\": 1}}",
     "True7['items', 'x']dfltNoneFalseFalseFalse1"},
    {"dotted_index",
     "{{ xs.0 }}{{ xs.1.a }}",
     "{\"xs\": [\"first\", {\"a\": \"A\"}]}",
     "firstA"},
    {"str_methods",
     "{{ ' a b  c '.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ 'xxhixx'.strip('x') }}|{{ '  hi\\n'.rstrip() }}|{{ '\\n\\nhi'.lstrip('\\n') }}{{ 'Hello'.startswith(('x', 'He')) }}{{ 'Hello'.endswith('lo') }}",
     NULL,
     "['a', 'b', 'c']['a', 'b', '', 'c']['a', 'b,c']['a,b', 'c']hi|  hi|hiTrueTrue"},
    {"str_methods2",
     "{{ 'hello world'.title() }}{{ 'hELLO'.capitalize() }}{{ 'abc'.upper() }}{{ 'ABC'.lower() }}{{ 'a-b-c'.replace('-', '+') }}{{ 'a-b-c'.replace('-', '', 1) }}{{ 'banana'.find('an') }}{{ 'banana'.rfind('an') }}{{ 'banana'.count('a') }}{{ '-'.join(['x', 'y']) }}{{ '12'.isdigit() }}{{ 'a1'.isalpha() }}",
     NULL,
     "Hello WorldHelloABCabca+b+cab-c133x-yTrueFalse"},
    {"str_splitlines",
     "{{ 'a\\nb\\r\\nc'.splitlines() }}{{ 'x'.replace('', '.') }}",
     NULL,
     "['a', 'b', 'c'].x."},
    {"f_tojson",
     "{{ v|tojson }}\n{{ v|tojson(indent=2) }}\n{{ v|tojson(ensure_ascii=True) }}\n{{ v|tojson(sort_keys=True, separators=(',', ':')) }}\n{{ 'x\"\\\\\\t\\u0001'|tojson }}",
     "{\"v\": {\"z\": [1, 2.5, true, null], \"a\": \"Gr\\u00fc\\u00dfe \\ud83d\\udc4b\", \"m\": {}, \"l\": []}}",
     "{\"z\": [1, 2.5, true, null], \"a\": \"Grüße 👋\", \"m\": {}, \"l\": []}\n{\n  \"z\": [\n    1,\n    2.5,\n    true,\n    null\n  ],\n  \"a\": \"Grüße 👋\",\n  \"m\": {},\n  \"l\": []\n}\n{\"z\": [1, 2.5, true, null], \"a\": \"Gr\\u00fc\\u00dfe \\ud83d\\udc4b\", \"m\": {}, \"l\": []}\n{\"a\":\"Grüße 👋\",\"l\":[],\"m\":{},\"z\":[1,2.5,true,null]}\n\"x\\\"\\\\\\t\\u0001\""},
    {"f_tojson_numbers",
     "{{ [1.0, 1e16, 1.5e-05, 0.1 + 0.2, 100.0, -0.0, 1e300 * 1e300, 3 / 2, 7 // 2]|tojson }}",
     NULL,
     "[1.0, 1e+16, 1.5e-05, 0.30000000000000004, 100.0, -0.0, Infinity, 1.5, 3]"},
    {"f_join_map_select",
     "{{ xs|map(attribute='n')|join(',') }}|{{ xs|selectattr('ok')|map(attribute='n')|list }}|{{ xs|rejectattr('ok')|list|length }}|{{ xs|selectattr('n', 'equalto', 2)|first }}|{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3]|reject('gt', 1)|list }}|{{ ['a', 'b']|map('upper')|join }}",
     "{\"xs\": [{\"n\": 1, \"ok\": true}, {\"n\": 2, \"ok\": false}, {\"n\": 3, \"ok\": true}]}",
     "1,2,3|[1, 3]|1|{'n': 2, 'ok': False}|[1, 3]|[1]|AB"},
    {"f_sort_unique",
     "{{ ['b', 'A', 'c', 'a']|sort }}{{ ['b', 'A', 'c', 'a']|sort(case_sensitive=true) }}{{ [3, 1, 2]|sort(reverse=true) }}{{ xs|sort(attribute='n')|map(attribute='n')|list }}{{ ['a', 'A', 'b', 'a']|unique|list }}{{ d|dictsort }}",
     "{\"xs\": [{\"n\": 2}, {\"n\": 1}], \"d\": {\"b\": 1, \"a\": 2}}",
     "['A', 'a', 'b', 'c']['A', 'a', 'b', 'c'][3, 2, 1][1, 2]['a', 'b'][('a', 2), ('b', 1)]"},
    {"f_misc",
     "{{ u|default('dflt') }}{{ ''|default('empty', true) }}{{ 'héllo'|length }}{{ '  x  '|trim }}{{ 'xxaxx'|trim('x') }}{{ [3, 1]|first }}{{ [3, 1]|last }}{{ '42'|int + 1 }}{{ '4.5'|float }}{{ 'x'|int }}{{ 3.7|int }}{{ 2.5|round }}{{ 3.14159|round(2) }}{{ -3|abs }}{{ [1, 2, 3]|sum }}{{ [4, 1, 9]|min }}{{ [4, 1, 9]|max }}{{ 'abc'|reverse }}{{ [1, 2]|reverse|list }}{{ '<a href=\"x\">&'|e }}{{ 'ab'|list }}{{ {'k': 1}|list }}",
     NULL,
     "dfltempty5xa31434.5032.03.143619cba[2, 1]&lt;a href=&#34;x&#34;&gt;&amp;['a', 'b']['k']"},
    {"f_indent",
     "[{{ 'a\\nb\\n\\nc'|indent }}][{{ 'a\\nb'|indent(2, true) }}][{{ 'a\\n\\nb'|indent('> ', blank=true) }}]",
     NULL,
     "[a\n    b\n\n    c][  a\n  b][a\n> \n> b]"},
    {"f_string_count",
     "{{ [1, 'a', none, true, 1.5]|string }}{{ {'a': [1, (2, 3)]}|string }}{{ xs|count }}{{ none|string }}",
     "{\"xs\": [1, 2]}",
     "[1, 'a', None, True, 1.5]{'a': [1, (2, 3)]}2None"},
    {"tests",
     "{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ 'x' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'x' is iterable }}{{ 1 is iterable }}{{ none is none }}{{ u is defined }}{{ u is undefined }}{{ 6 is divisibleby 3 }}{{ 7 is divisibleby(3) }}{{ 2 is even }}{{ 'a' is in 'cat' }}{{ 1 is in [1, 2] }}{{ true is sameas true }}{{ 'x' is eq 'x' }}{{ 3 is gt 2 }}{{ false is false }}{{ 0 is false }}{{ 'ABC' is upper }}{{ 'abc' is lower }}{{ x is not none }}",
     "{\"x\": 0}",
     "TrueTrueTrueTrueTrueTrueTrueTrueFalseTrueFalseTrueTrueFalseTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrue"},
    {"operators",
     "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1 + 2.5 }} {{ true + 1 }} {{ 'ab' * 3 }} {{ [0] * 2 }} {{ 3 * 'x' }} {{ 5.5 // 2 }} {{ -5.5 % 2 }} {{ 10 - 2 - 3 }} {{ 2 ** 3 ** 2 }}",
     NULL,
     "3 -4 2 -2 3.5 1024 0.5 3.5 2 ababab [0, 0] xxx 2.0 0.5 5 64"},
    {"operators_logic",
     "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ none or [] }} {{ not [] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' > 'a' }} {{ [1, 2] < [1, 3] }} {{ 'x' in 'xyz' }} {{ 'q' not in 'xyz' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' in u }} {{ 1 == 1.0 }} {{ true == 1 }} {{ [1, 2] == [1, 2] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ (1, 2) == [1, 2] }}",
     NULL,
     "x b  [] True True False True True True True True True False True True True True False"},
    {"operators_concat",
     "{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ u ~ [1] ~ '|' }}{{ 'yes' if 1 else 'no' }}{{ 'yes' if 0 }}|{{ -(3) }}{{ +2 }}{{ - 2.5 }}{{ 'x' if u is defined else 'y' }}",
     NULL,
     "a1NoneTrue1.5[1]|yes|-32-2.5y"},
    {"repr_values",
     "{{ ['a', \"b'c\", 'd\"e', 'f\\\\g\\n'] }} {{ {'k': none, 1: true, 2.5: [()]} }} {{ (1,) }} {{ () }} {{ 1e16 }} {{ 1.5e-05 }} {{ 0.1 + 0.2 }} {{ 100.0 }} {{ 1e22 }} {{ 123456789012345678 }}",
     NULL,
     "['a', \"b'c\", 'd\"e', 'f\\\\g\\n'] {'k': None, 1: True, 2.5: [()]} (1,) () 1e+16 1.5e-05 0.30000000000000004 100.0 1e+22 123456789012345678"},
    {"literals",
     "{{ 'caf\\u00e9' }} {{ '\\x41\\x42' }} {{ 'tab\\there' }} {{ \"it's\" }} {{ 'a' 'b' \"c\" }} {{ 1_000 }} {{ 0x1f }} {{ 1.5e3 }} {{ True }}{{ None }}{{ false }} {{ 'back\\\\slash' }} {{ '\\d' }}",
     NULL,
     "café AB tab\there it's abc 1000 31 1500.0 TrueNoneFalse back\\slash \\d"},
    {"globals",
     "{{ range(3)|list }}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}{{ dict(a=1, b='x') }}{{ namespace(a=1).a }}{{ strftime_now('%Y-%m-%d %d %b %Y') }}",
     NULL,
     "[0, 1, 2][1, 4, 7][5, 3, 1]{'a': 1, 'b': 'x'}12024-07-26 26 Jul 2024"},
    {"unicode_ops",
     "{{ 'Grüße'|lower }}|{{ '  \\u3000x\\u00a0'|trim }}|{{ 'a\\u2003b'.split() }}|{{ 'ü' in 'Grüße' }}",
     NULL,
     "grüße|x|['a', 'b']|True"},
};

TEST(chat_jinja_semantics_match_jinja2)
{
    size_t n = sizeof semantics_cases / sizeof semantics_cases[0], passed = 0;
    char failures[1536] = "", first[1024] = "";
    for (size_t k = 0; k < n; k++) {
        const struct semantics_case *c = &semantics_cases[k];
        hydra_chat_params params = hydra_chat_default_params();
        params.extra_json = c->vars;
        params.fixed_time = true;
        params.fixed_now = GOLDEN_TIME;
        char *out = NULL;
        hydra_status st = render(c->text, NULL, &params, &out);
        bool ok = st == HYDRA_OK && strcmp(out, c->expected) == 0;
        if (ok) {
            passed++;
        } else {
            size_t used = strlen(failures);
            snprintf(failures + used, sizeof failures - used, "%s%s", used ? ", " : "", c->name);
            if (first[0] == '\0' && st != HYDRA_OK)
                snprintf(first, sizeof first, "%s: %s", c->name, hydra_last_error());
            else if (first[0] == '\0')
                describe_difference(out, strlen(out), c->expected, strlen(c->expected), first, sizeof first);
        }
        free(out);
    }
    if (passed != n)
        FAIL("%zu/%zu match jinja2; failing: %s\n    first: %s", passed, n, failures, first);
}

/* -------------------------------------------------------------- errors */

static const struct error_case {
    const char *text;
    hydra_status status;
    const char *message; /* a substring of hydra_last_error() */
} error_cases[] = {
    /* load time */
    {"{% if x %}abc", HYDRA_ERR_FORMAT,
     "line 1, column 14: unexpected end of template, expected 'elif' or 'else' or 'endif'"},
    {"hello\n{{ x | nosuchfilter }}", HYDRA_ERR_UNSUPPORTED, "line 2, column 8: no filter named 'nosuchfilter'"},
    {"{{ x is nosuchtest }}", HYDRA_ERR_UNSUPPORTED, "line 1, column 9: no test named 'nosuchtest'"},
    {"a\n\n  {% foo %}", HYDRA_ERR_FORMAT, "line 3, column 6: unknown tag 'foo'"},
    {"{{ 'abc }}", HYDRA_ERR_FORMAT, "line 1, column 4: unterminated string literal"},
    {"x {# never closed", HYDRA_ERR_FORMAT, "line 1, column 3: missing end of comment tag"},
    {"{% include 'x' %}", HYDRA_ERR_UNSUPPORTED, "line 1, column 4: the 'include' statement is not supported"},
    {"{% break %}", HYDRA_ERR_FORMAT, "line 1, column 1: 'break' outside of a for loop"},
    {"{{ 1 + }}", HYDRA_ERR_FORMAT, "line 1, column 8: expected an expression, got '}}'"},
    {"{{ x ) }}", HYDRA_ERR_FORMAT, "line 1, column 6: unexpected ')'"},
    {"{% endfor %}", HYDRA_ERR_FORMAT, "unknown tag 'endfor'"},
    {"{{ f(a=1, 2) }}", HYDRA_ERR_FORMAT, "positional argument after keyword argument"},
    {"{{ x", HYDRA_ERR_FORMAT, "line 1, column 1: unexpected end of template: tag '{{' is never closed"},
    /* render time */
    {"line1\n  {{ raise_exception('bad role') }}", HYDRA_ERR_INVALID_ARG, "line 2, column 6: raise_exception: bad role"},
    {"{{ foo.bar }}", HYDRA_ERR_INVALID_ARG, "line 1, column 7: 'foo' is undefined"},
    {"{{ 1 + 'a' }}", HYDRA_ERR_TYPE, "line 1, column 6: unsupported operand type(s) for +: 'int' and 'str'"},
    {"{{ nosuch() }}", HYDRA_ERR_INVALID_ARG, "line 1, column 4: 'nosuch' is undefined"},
    {"{{ u|tojson }}", HYDRA_ERR_INVALID_ARG, "tojson: 'u' is undefined"},
    {"{% for a, b in [1] %}{% endfor %}", HYDRA_ERR_TYPE, "'int' object is not iterable"},
    {"{{ 1 // 0 }}", HYDRA_ERR_INVALID_ARG, "integer division or modulo by zero"},
    {"{% set x = 1 %}{% set x.y = 2 %}", HYDRA_ERR_TYPE, "which is not a namespace()"},
    {"{{ 'a'.split('') }}", HYDRA_ERR_INVALID_ARG, "empty separator"},
    {"{{ [1, 2]|join(', ', attribute='x', y=1) }}", HYDRA_ERR_INVALID_ARG, "unexpected keyword argument 'y'"},
    {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", HYDRA_ERR_INVALID_ARG, "macro 'm' takes not more than 1"},
    {"{{ 9223372036854775807 + 1 }}", HYDRA_ERR_RANGE, "integer overflow"},
};

TEST(chat_errors_name_line_and_column)
{
    for (size_t k = 0; k < sizeof error_cases / sizeof error_cases[0]; k++) {
        const struct error_case *c = &error_cases[k];
        char *out = NULL;
        hydra_status st = render(c->text, NULL, NULL, &out);
        if (st != c->status || out != NULL || strstr(hydra_last_error(), c->message) == NULL)
            FAIL("template %zu \"%s\": status %s, message \"%s\"; expected %s with \"%s\"", k, c->text,
                 hydra_strerror(st), hydra_last_error(), hydra_strerror(c->status), c->message);
    }
}

/* The templates' own raise_exception guards, through the built-ins. */
TEST(chat_template_raise_exception)
{
    static const struct {
        const char *builtin, *messages, *message;
    } cases[] = {
        {"mistral-nemo", "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]",
         "raise_exception: After the optional system message, conversation roles must alternate"},
        {"gpt-oss", "[{\"role\": \"tool\", \"content\": \"42\"}]",
         "raise_exception: Message has tool role, but there was no previous assistant message with a tool call!"},
        {"llama3",
         "[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"a\", \"arguments\": {}}},"
         " {\"function\": {\"name\": \"b\", \"arguments\": {}}}]}]",
         "raise_exception: This model only supports single tool-calls at once!"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *text;
        CHECK_OK(hydra_chat_builtin(cases[k].builtin, &text));
        char *out = NULL;
        hydra_status st = render(text, cases[k].messages, NULL, &out);
        if (st != HYDRA_ERR_INVALID_ARG || strstr(hydra_last_error(), cases[k].message) == NULL ||
            strstr(hydra_last_error(), "chat template line ") == NULL)
            FAIL("%s: %s: %s", cases[k].builtin, hydra_strerror(st), hydra_last_error());
        CHECK(out == NULL);
    }
}

TEST(chat_bad_json_arguments)
{
    hydra_chat_template *tmpl;
    CHECK_OK(hydra_chat_template_new("{{ messages|length }}", &tmpl));
    char *out = NULL;
    hydra_status st = hydra_chat_apply_json(tmpl, "[{\"role\": \"user\",}]", NULL, &out, NULL);
    CHECK_EQ_INT(st, HYDRA_ERR_FORMAT);
    CHECK(strstr(hydra_last_error(), "messages_json: invalid JSON at byte 17") != NULL);
    st = hydra_chat_apply_json(tmpl, "{\"role\": \"user\"}", NULL, &out, NULL);
    CHECK_EQ_INT(st, HYDRA_ERR_INVALID_ARG);
    hydra_chat_params params = hydra_chat_default_params();
    params.extra_json = "[1]";
    st = hydra_chat_apply_json(tmpl, "[]", &params, &out, NULL);
    CHECK_EQ_INT(st, HYDRA_ERR_INVALID_ARG);
    params.extra_json = NULL;
    params.tools_json = "[{\"a\": tru}]";
    st = hydra_chat_apply_json(tmpl, "[]", &params, &out, NULL);
    CHECK_EQ_INT(st, HYDRA_ERR_FORMAT);
    CHECK(strstr(hydra_last_error(), "tools") != NULL);
    hydra_chat_message bad = {.role = NULL, .content = "x"};
    st = hydra_chat_apply(tmpl, &bad, 1, NULL, &out, NULL);
    CHECK_EQ_INT(st, HYDRA_ERR_INVALID_ARG);
    CHECK(out == NULL);
    hydra_chat_template_free(tmpl);
}

/* ------------------------------------------------------------- limits */

/* prefix + unit*n + suffix, malloc'd. */
static char *repeat_text(const char *prefix, const char *unit, size_t n, const char *suffix)
{
    size_t a = strlen(prefix), u = strlen(unit), b = strlen(suffix);
    char *text = malloc(a + u * n + b + 1);
    if (text == NULL)
        return NULL;
    memcpy(text, prefix, a);
    for (size_t k = 0; k < n; k++)
        memcpy(text + a + k * u, unit, u);
    memcpy(text + a + u * n, suffix, b + 1);
    return text;
}

/* Renders with small limits (1 MiB out, 32 MiB of values, `steps` steps);
 * the status and a message substring must match. */
static bool limited(const char *text, uint64_t steps, hydra_status want, const char *message, char *why, size_t size)
{
    hydra_chat_params params = hydra_chat_default_params();
    params.max_output = 1 << 20;
    params.max_memory = 32 << 20;
    params.max_steps = steps;
    char *out = NULL;
    hydra_status st = text ? render(text, NULL, &params, &out) : HYDRA_ERR_NOMEM;
    bool ok = st == want && out == NULL && strstr(hydra_last_error(), message) != NULL;
    if (!ok)
        snprintf(why, size, "status %s (want %s), message \"%s\" (want \"%s\")", hydra_strerror(st),
                 hydra_strerror(want), hydra_last_error(), message);
    free(out);
    return ok;
}

#define CHECK_LIMITED_STEPS(text, steps, want, message)                       \
    do {                                                                      \
        char why_[1024];                                                      \
        char *text_ = (text);                                                 \
        bool ok_ = limited(text_, steps, want, message, why_, sizeof why_);   \
        free(text_);                                                          \
        if (!ok_)                                                             \
            FAIL("%s: %s", #text, why_);                                      \
    } while (0)

#define CHECK_LIMITED(text, want, message) CHECK_LIMITED_STEPS(text, 1000000, want, message)

TEST(chat_limits_deep_nesting)
{
    CHECK_LIMITED(repeat_text("{{ ", "not ", 100000, "1 }}"), HYDRA_ERR_RANGE, "nested deeper than the limit");
    CHECK_LIMITED(repeat_text("", "{% if 1 %}", 20000, ""), HYDRA_ERR_RANGE, "nested deeper than the limit");
    CHECK_LIMITED(repeat_text("{{ ", "-", 100000, "1 }}"), HYDRA_ERR_RANGE, "nested deeper than the limit");
    CHECK_LIMITED(repeat_text("{{ ", "[", 100000, "1 }}"), HYDRA_ERR_FORMAT, "brackets nested deeper than 256");
    /* A flat chain parses in a loop but evaluates recursively. */
    CHECK_LIMITED(repeat_text("{{ 1", " + 1", 100000, " }}"), HYDRA_ERR_RANGE, "evaluation nested deeper");
    CHECK_LIMITED(strdup("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), HYDRA_ERR_RANGE,
                  "evaluation nested deeper");
}

TEST(chat_limits_huge_loops)
{
    CHECK_LIMITED(strdup("{% for i in range(1000000000) %}{% endfor %}"), HYDRA_ERR_RANGE, "step limit");
    CHECK_LIMITED(strdup("{% for i in range(5000) %}{% for j in range(5000) %}{% endfor %}{% endfor %}"),
                  HYDRA_ERR_RANGE, "step limit");
    CHECK_LIMITED_STEPS(strdup("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                               "{{ f(30) }}"),
                        50000, HYDRA_ERR_RANGE, "step limit");
    CHECK_LIMITED(strdup("{% for i in range(-9223372036854775807, 9223372036854775807, 3) %}{% endfor %}"),
                  HYDRA_ERR_RANGE, "step limit");
}

TEST(chat_limits_output_and_memory)
{
    CHECK_LIMITED(strdup("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}"), HYDRA_ERR_RANGE,
                  "output longer than the limit of 1048576 bytes");
    CHECK_LIMITED(strdup("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
                         "{% endfor %}"),
                  HYDRA_ERR_NOMEM, "memory limit of 33554432 bytes reached");
    CHECK_LIMITED(strdup("{{ 'x' * 10 ** 12 }}"), HYDRA_ERR_NOMEM, "memory limit");
    CHECK_LIMITED(strdup("{{ [1, 2] * 10 ** 12 }}"), HYDRA_ERR_NOMEM, "memory limit");
    CHECK_LIMITED(strdup("{% macro m() %}{{ 'y' * 600000 }}{{ 'y' * 600000 }}{% endmacro %}{{ m() }}"),
                  HYDRA_ERR_RANGE, "output longer than the limit");
}

/* Values that refer to themselves or nest a million deep print, compare
 * and serialize without recursing off the stack. */
TEST(chat_limits_self_reference)
{
    hydra_chat_params params = hydra_chat_default_params();
    char *out = NULL;
    CHECK_OK(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ (ns|string)[:40] }}", NULL, &params, &out));
    CHECK_EQ_STR(out, "<Namespace {'me': <Namespace {'me': <Nam");
    free(out);
    out = NULL;
    CHECK_EQ_INT(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns|tojson }}", NULL, &params, &out),
                 HYDRA_ERR_TYPE);
    const char *deep = "{% set ns = namespace(a=[], b=[]) %}{% for i in range(100000) %}"
                       "{% set ns.a = [ns.a] %}{% set ns.b = [ns.b] %}{% endfor %}"
                       "{{ ns.a == ns.b }}{{ ns.a == ns.a }}{{ (ns.a|string)|length > 100 }}";
    CHECK_OK(render(deep, NULL, &params, &out));
    CHECK_EQ_STR(out, "FalseTrueTrue");
    free(out);
    out = NULL;
    const char *deep_json = "{% set ns = namespace(a=[]) %}{% for i in range(100000) %}{% set ns.a = [ns.a] %}"
                            "{% endfor %}{{ ns.a|tojson }}";
    CHECK_EQ_INT(render(deep_json, NULL, &params, &out), HYDRA_ERR_TYPE);
    CHECK(out == NULL);
}

/* Random byte edits of real templates: every result is a clean status. */
TEST(chat_mutated_templates_never_crash)
{
    static const char *const names[] = {"qwen3", "llama3", "mistral-nemo", "deepseek-v3.1", "gpt-oss",
                                        "glm-4.6", "kimi-k2"};
    static const char alphabet[] = "{}%#-+()[]'\"|.~=!<>,: \n\\abx0";
    const char *messages = "[{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"},"
                           " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"abc123XYZ\","
                           " \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1}}}]},"
                           " {\"role\": \"tool\", \"tool_call_id\": \"abc123XYZ\", \"content\": \"r\"}]";
    hydra_chat_params params = hydra_chat_default_params();
    params.add_generation_prompt = true;
    params.max_steps = 100000;
    params.tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
                        " \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"integer\"}}}}}]";
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int rendered = 0, refused = 0;
    for (int round = 0; round < 1400; round++) {
        const char *text;
        CHECK_OK(hydra_chat_builtin(names[round % 7], &text));
        char *copy = strdup(text);
        size_t len = strlen(copy);
        for (int edit = 0; edit < 1 + round % 4; edit++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            copy[(rng >> 33) % len] = alphabet[(rng >> 13) % (sizeof alphabet - 1)];
        }
        char *out = NULL;
        hydra_status st = render(copy, messages, &params, &out);
        if (st == HYDRA_OK)
            rendered++;
        else
            refused++;
        CHECK(st == HYDRA_OK ? out != NULL : out == NULL);
        free(out);
        free(copy);
    }
    CHECK(rendered > 0 && refused > 0);
}

/* ----------------------------------------------------------- built-ins */

TEST(chat_builtins_are_the_shared_templates)
{
    REQUIRE_SHARED();
    static const struct {
        const char *name, *file;
    } copies[] = {
        {"qwen3", "Qwen-Qwen3-0.6B.jinja"},
        {"llama3", "meta-llama-Llama-3.3-70B-Instruct.jinja"},
        {"mistral-nemo", "mistralai-Mistral-Nemo-Instruct-2407.jinja"},
        {"deepseek-v3.1", "deepseek-ai-DeepSeek-V3.1.jinja"},
        {"gpt-oss", "openai-gpt-oss-120b.jinja"},
        {"glm-4.6", "GLM-4.6.jinja"},
        {"kimi-k2", "moonshotai-Kimi-K2.jinja"},
    };
    for (size_t k = 0; k < sizeof copies / sizeof copies[0]; k++) {
        const char *text;
        CHECK_OK(hydra_chat_builtin(copies[k].name, &text));
        char *file = read_template(copies[k].file);
        bool same = file && strcmp(file, text) == 0;
        free(file);
        if (!same)
            FAIL("built-in %s differs from ../shared/chat/%s", copies[k].name, copies[k].file);
    }
}

TEST(chat_builtin_names_and_chatml)
{
    /* Every advertised name resolves and parses. */
    char names[512];
    snprintf(names, sizeof names, "%s", hydra_chat_builtin_names());
    int count = 0;
    for (char *name = strtok(names, ", "); name; name = strtok(NULL, ", ")) {
        const char *text;
        hydra_chat_template *tmpl;
        CHECK_OK(hydra_chat_builtin(name, &text));
        CHECK_OK(hydra_chat_template_new(text, &tmpl));
        hydra_chat_template_free(tmpl);
        count++;
    }
    CHECK_EQ_INT(count, 8);
    const char *text;
    CHECK_OK(hydra_chat_builtin("chatml", &text));
    hydra_chat_message m[] = {{.role = "system", .content = "Be brief."}, {.role = "user", .content = "Hi"}};
    hydra_chat_params params = hydra_chat_default_params();
    params.add_generation_prompt = true;
    hydra_chat_template *tmpl;
    CHECK_OK(hydra_chat_template_new(text, &tmpl));
    char *out;
    size_t len;
    CHECK_OK(hydra_chat_apply(tmpl, m, 2, &params, &out, &len));
    CHECK_EQ_STR(out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                      "<|im_start|>assistant\n");
    CHECK_EQ_U64(len, strlen(out));
    free(out);
    hydra_chat_template_free(tmpl);
}

TEST(chat_unknown_template_names_the_flag)
{
    const char *text = "unchanged";
    CHECK_EQ_INT(hydra_chat_builtin("no-such-template", &text), HYDRA_ERR_NOT_FOUND);
    CHECK(text == NULL);
    CHECK(strstr(hydra_last_error(), "unknown chat template \"no-such-template\"") != NULL);
    CHECK(strstr(hydra_last_error(), "--chat-template") != NULL);
    CHECK(strstr(hydra_last_error(), "chatml") != NULL);
    CHECK_EQ_INT(hydra_chat_model_template(NULL, "nope", &text), HYDRA_ERR_NOT_FOUND);
    CHECK(strstr(hydra_last_error(), "--chat-template") != NULL);
    /* A template text given in place of a name is used as it is. */
    CHECK_OK(hydra_chat_model_template(NULL, "{{ 'inline' }}", &text));
    CHECK_EQ_STR(text, "{{ 'inline' }}");
}

/* ---------------------------------------------------- model selection */

/* A GGUF with only tokenizer metadata (and optionally a chat template). */
static hydra_status write_vocab_gguf(const char *path, const char *chat_template)
{
    static const char *const tokens[] = {"<unk>", "<|begin|>", "<|end|>", "hi"};
    gguf_writer *w;
    hydra_status st = gguf_writer_open(&w, path);
    if (st != HYDRA_OK)
        return st;
    st = gguf_writer_add_str(w, "general.architecture", "llama");
    if (st == HYDRA_OK)
        st = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tokens, 4);
    if (st == HYDRA_OK)
        st = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (st == HYDRA_OK)
        st = gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (st == HYDRA_OK && chat_template)
        st = gguf_writer_add_str(w, "tokenizer.chat_template", chat_template);
    return gguf_writer_finish(w, st);
}

TEST(chat_model_template_and_tokens)
{
    const char *path = util_scratch_path("chat-vocab.gguf");
    CHECK_OK(write_vocab_gguf(path, "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
                                    "{{ eos_token }}"));
    hydra_model_params mp = hydra_model_default_params();
    mp.path = path;
    hydra_model *model;
    CHECK_OK(hydra_model_open(&model, &mp));
    const char *text;
    CHECK_OK(hydra_chat_model_template(model, NULL, &text));
    hydra_chat_params params = hydra_chat_default_params();
    hydra_chat_model_tokens(model, &params);
    CHECK_EQ_STR(params.bos_token, "<|begin|>");
    CHECK_EQ_STR(params.eos_token, "<|end|>");
    hydra_chat_template *tmpl;
    CHECK_OK(hydra_chat_template_new(text, &tmpl));
    hydra_chat_message m = {.role = "user", .content = "hi"};
    char *out;
    CHECK_OK(hydra_chat_apply(tmpl, &m, 1, &params, &out, NULL));
    CHECK_EQ_STR(out, "<|begin|>[user]hi<|end|>");
    free(out);
    hydra_chat_template_free(tmpl);
    /* An override name wins over the model's template. */
    CHECK_OK(hydra_chat_model_template(model, "chatml", &text));
    CHECK(strstr(text, "<|im_start|>") != NULL);
    hydra_model_close(model);

    CHECK_OK(write_vocab_gguf(path, NULL));
    CHECK_OK(hydra_model_open(&model, &mp));
    CHECK_EQ_INT(hydra_chat_model_template(model, NULL, &text), HYDRA_ERR_NOT_FOUND);
    CHECK(strstr(hydra_last_error(), "--chat-template") != NULL);
    hydra_model_close(model);
}

/* ----------------------------------------------------------- threads */

typedef struct apply_job {
    const hydra_chat_template *tmpl;
    const char *expected;
    int mismatches;
} apply_job;

static void *apply_many(void *arg)
{
    apply_job *job = arg;
    hydra_chat_params params = hydra_chat_default_params();
    params.add_generation_prompt = true;
    params.fixed_time = true;
    params.fixed_now = GOLDEN_TIME;
    for (int k = 0; k < 200; k++) {
        char *out = NULL;
        if (hydra_chat_apply_json(job->tmpl, "[{\"role\": \"user\", \"content\": \"hi\"}]", &params, &out, NULL) !=
                HYDRA_OK ||
            strcmp(out, job->expected) != 0)
            job->mismatches++;
        free(out);
    }
    return NULL;
}

/* One parsed template applied from several threads at once. */
TEST(chat_template_shared_between_threads)
{
    const char *text;
    CHECK_OK(hydra_chat_builtin("gpt-oss", &text));
    hydra_chat_template *tmpl;
    CHECK_OK(hydra_chat_template_new(text, &tmpl));
    hydra_chat_params params = hydra_chat_default_params();
    params.add_generation_prompt = true;
    params.fixed_time = true;
    params.fixed_now = GOLDEN_TIME;
    char *expected;
    CHECK_OK(hydra_chat_apply_json(tmpl, "[{\"role\": \"user\", \"content\": \"hi\"}]", &params, &expected, NULL));
    CHECK(strstr(expected, "Current date: 2024-07-26") != NULL);
    apply_job jobs[4];
    pthread_t threads[4];
    for (int t = 0; t < 4; t++) {
        jobs[t] = (apply_job){.tmpl = tmpl, .expected = expected};
        CHECK_EQ_INT(pthread_create(&threads[t], NULL, apply_many, &jobs[t]), 0);
    }
    int mismatches = 0;
    for (int t = 0; t < 4; t++) {
        pthread_join(threads[t], NULL);
        mismatches += jobs[t].mismatches;
    }
    free(expected);
    hydra_chat_template_free(tmpl);
    CHECK_EQ_INT(mismatches, 0);
}
