#include "common/text/jinja_template.h"

#include <catch2/catch.hpp>

#include <string>

#include "common/text/jinja_value.h"

namespace verl {
namespace {

// Renders `source` with `vars`; a failure is reported with the status.
std::string Render(const std::string& source, const JinjaValue::Dict& vars = {}, const JinjaRenderOptions& o = {}) {
  absl::StatusOr<JinjaTemplate> t = JinjaTemplate::Parse(source, "t.jinja");
  INFO(source);
  INFO(t.status().ToString());
  REQUIRE(t.ok());
  absl::StatusOr<std::string> out = t->Render(vars, o);
  INFO(out.status().ToString());
  REQUIRE(out.ok());
  return *out;
}

// The error of parsing or rendering `source`.
absl::Status Error(const std::string& source, const JinjaValue::Dict& vars = {}) {
  absl::StatusOr<JinjaTemplate> t = JinjaTemplate::Parse(source, "t.jinja");
  if (!t.ok()) return t.status();
  absl::StatusOr<std::string> out = t->Render(vars);
  INFO(source << " rendered " << (out.ok() ? *out : ""));
  REQUIRE(!out.ok());
  return out.status();
}

JinjaValue Json(const std::string& text) {
  absl::StatusOr<JinjaValue> v = JinjaValue::FromJson(text);
  REQUIRE(v.ok());
  return *v;
}

TEST_CASE("jinja: whitespace control as transformers configures it (trim_blocks, lstrip_blocks)") {
  CHECK(Render("{% if true %}\n  yes\n{% endif %}\nend") == "  yes\nend");
  CHECK(Render("<ul>\n    {% for x in [1, 2] %}\n    <li>{{ x }}</li>\n    {% endfor %}\n</ul>") ==
        "<ul>\n    <li>1</li>\n    <li>2</li>\n</ul>");
  CHECK(Render("a  {{- 'b' -}}  \n c") == "abc");
  CHECK(Render("a\n  {%- if true -%}\n  b  {%- endif %}") == "ab");
  CHECK(Render("  {%+ if true %}x{% endif %}") == "  x");
  CHECK(Render("{% if true +%}\nx{% endif %}") == "\nx");
  CHECK(Render("  {{ 'x' }}\n") == "  x");  // variables are neither lstripped nor trimmed; one final newline goes
  CHECK(Render("hi\n\n") == "hi\n");
  CHECK(Render("hi\r\nthere\r\n") == "hi\nthere");
  CHECK(Render("a {# note #} b") == "a  b");
  CHECK(Render("a\n  {# note #}\nb") == "a\nb");
  CHECK(Render("{#- note -#}\n  b") == "b");
  CHECK(Render("x {{ 'a' }}{# c #}{{ 'b' }}") == "x ab");
  CHECK(Render("  {% raw %}{{ not rendered }} {% x %}{% endraw %}!") == "{{ not rendered }} {% x %}!");
  CHECK(Render("{% for i in [1, 2] %}{{ i }}\n{% endfor %}") == "1\n2\n");
}

// Case methods, filters and tests over Unicode as CPython 3.11 and Jinja 3.1.6 give them (expected strings taken from
// them): full mappings ('ß'.upper() is 'SS'), the final sigma, title case for digraphs, CPython's character classes;
// Jinja's title filter splits only at '-', whitespace and '({[<' (so "it's" stays "It's", unlike str.title()).
TEST_CASE("jinja: str case methods and classes are Python's over Unicode") {
  CHECK(Render("{{ 'straße'.upper() }}|{{ 'ǆ ﬁ ŉ'.upper() }}|{{ 'ΟΔΟΣ ΟΔΟΣ. Σ ΑΣ\\'Β'.lower() }}|"
               "{{ 'İ'.lower() | length }}") == "STRASSE|Ǆ FI ʼN|οδος οδος. σ ασ'β|2");
  CHECK(Render("{{ 'hello\\'s wORLD'.title() }}|{{ 'ǆemal ßa ﬁsh ΣΑΣ ΣΑΣ'.title() }}|{{ 'ǆEMAL'.capitalize() }}|"
               "{{ 'ΑΣ'.capitalize() }}|{{ 'ßX'.capitalize() }}") == "Hello'S World|ǅemal Ssa Fish Σας Σας|ǅemal|Ας|Ssx");
  CHECK(Render("{{ '²٣'.isdigit() }} {{ '½'.isdigit() }} {{ '½一'.isalnum() }} {{ 'a_'.isalnum() }} "
               "{{ 'éǅ'.isalpha() }} {{ '٣'.isalpha() }}") == "True False True False True False");
  CHECK(Render("{{ 'ßª'.islower() }} {{ 'aǅ'.islower() }} {{ 'Ⅷ'.isupper() }} {{ '1A'.isupper() }} "
               "{{ '12'.islower() }} {{ ''.isupper() }}") == "True False True True False False");
  CHECK(Render("{{ 'it\\'s a_b (x-y)<z' | title }}|{{ 'straße ﬁsh' | title }}|{{ 'ÉCOLE' | lower }}|"
               "{{ 'école' | upper }}|{{ 'éCOLE ΑΣ' | capitalize }}") == "It's A_b (X-Y)<Z|Straße FIsh|école|ÉCOLE|École ας");
  CHECK(Render("{{ '123' is lower }} {{ 'é' is lower }} {{ 'É1' is upper }} {{ ['a'] is lower }}") ==
        "False True True True");
  // sort without case_sensitive compares str.lower() keys: 'é' < 'ê', where the bytes of 'Ê' sort first.
  CHECK(Render("{{ ['Ê', 'é'] | sort | join(',') }} {{ ['Ê', 'é'] | sort(case_sensitive=true) | join(',') }}") ==
        "é,Ê Ê,é");
  // Bytes that are not UTF-8 pass through the mappings unchanged.
  CHECK(Render("{{ s.upper() }}", {{"s", JinjaValue::String("a\xff" "b")}}) == "A\xff" "B");
}

TEST_CASE("jinja: literals, operators and precedence") {
  CHECK(Render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7 - -1 }}") == "7 9 64 4 8");
  CHECK(Render("{{ 10 / 4 }} {{ 4 / 2 }} {{ 10 // 4 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 // 2 }}") ==
        "2.5 2.0 2 -4 2 3.0");
  CHECK(Render("{{ 'ab' * 2 }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none ~ true ~ 2.50 }}") == "abab [1, 2] a1NoneTrue2.5");
  CHECK(Render("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 2 == 2.0 }} {{ 'a' != 'b' }} {{ 1 <= 1 }} {{ 'b' >= 'a' }}") ==
        "True False True True True True");
  CHECK(Render("{{ '' or 'b' }} {{ 'a' and 'b' }} {{ not 0 }} {{ none or [] }}") == "b b True []");
  CHECK(Render("{{ 'x' in 'xyz' }} {{ 4 in [1, 2] }} {{ 4 not in [1, 2] }} {{ 'k' in {'k': 1} }}") ==
        "True False True True");
  CHECK(Render("{{ 'yes' if 0 else 'no' }}|{{ 'only' if false }}|{{ 1 if true else 2 if true else 3 }}") ==
        "no||1");
  CHECK(Render("{{ \"it's\" }} {{ 'tab\\tnew\\nline \\u00e9 \\x41 \\\\boxed \\q' }}") ==
        "it's tab\tnew\nline \xc3\xa9 A \\boxed \\q");
  CHECK(Render("{{ 'a' 'b' }} {{ 1_000 }} {{ 1e3 }} {{ 0.1 + 0.2 }} {{ true }} {{ None }} {{ True }}") ==
        "ab 1000 1000.0 0.30000000000000004 True None True");
  CHECK(Render("{{ [1, 'x', none, {'k': 'v', 'q': \"it's\"}, 1.5] }} {{ (1, 2) }}") ==
        "[1, 'x', None, {'k': 'v', 'q': \"it's\"}, 1.5] [1, 2]");
}

TEST_CASE("jinja: attribute, item and slice access") {
  const JinjaValue::Dict vars = {{"d", Json(R"({"a": 1, "b": {"c": [10, 20, 30]}, "items": "key"})")},
                                 {"s", JinjaValue::String("h\xc3\xa9llo")}};
  CHECK(Render("{{ d.a }} {{ d['b']['c'][1] }} {{ d.b.c[-1] }} {{ d.b.c.0 }} {{ d['items'] }}", vars) ==
        "1 20 30 10 key");
  CHECK(Render("{{ d.missing is defined }} {{ d.b.c[7] is defined }} [{{ d.missing }}] {{ none.x is defined }}",
               vars) == "False False [] False");
  CHECK(Render("{{ d.b.c[1:] }} {{ d.b.c[:-1] }} {{ d.b.c[::-1] }} {{ d.b.c[::2] }} {{ d.b.c[5:] }}", vars) ==
        "[20, 30] [10, 20] [30, 20, 10] [10, 30] []");
  CHECK(Render("{{ s[1] }} {{ s[::-1] }} {{ s | length }} {{ s[1:3] }} {{ s[-2:] }}", vars) ==
        "\xc3\xa9 oll\xc3\xa9h 5 \xc3\xa9l lo");
  CHECK(Render("{% for k, v in d.items() %}{{ k }};{% endfor %} {{ d.keys() | list }} {{ d.get('zz', 5) }}", vars) ==
        "a;b;items; ['a', 'b', 'items'] 5");
}

TEST_CASE("jinja: str methods") {
  CHECK(Render("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\na'.lstrip('\\n') }}|{{ 'a  '.rstrip() }}") ==
        "a b|a|a|a");
  CHECK(Render("{{ 'a</think>b</think>c'.split('</think>') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }}") ==
        "['a', 'b', 'c'] ['a', 'b'] ['a', 'b,c']");
  // Whitespace is Python's str.isspace(), Unicode included (U+3000, U+00A0, U+2003); with maxsplit the rest keeps its
  // trailing whitespace, as in Python.
  const std::string u3000 = "\xE3\x80\x80", nbsp = "\xC2\xA0", em = "\xE2\x80\x83";
  CHECK(Render("{{ 'a" + u3000 + "b" + nbsp + " c" + em + "'.split() }} {{ '" + u3000 + "x" + u3000 + "y z" + u3000 +
               "'.split(none, 1) }} {{ ' a b c '.split(none, 1) }} {{ '" + u3000 + nbsp + " '.isspace() }} {{ 'a" +
               u3000 + "'.isspace() }}") == "['a', 'b', 'c'] ['x', 'y z" + u3000 + "'] ['a', 'b c '] True False");
  CHECK(Render("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'abc'.upper() }} "
               "{{ 'ABC'.lower() }} {{ 'hello world'.title() }} {{ 'a-b'.replace('-', '+') }} {{ 'abcb'.find('b') }} "
               "{{ 'abcb'.count('b') }} {{ ', '.join(['x', 'y']) }}") ==
        "True True ABC abc Hello World a+b 1 2 x, y");
}

TEST_CASE("jinja: if, for, loop variables, break and continue") {
  CHECK(Render("{% if 0 %}a{% elif '' %}b{% elif [1] %}c{% else %}d{% endif %}") == "c");
  CHECK(Render("{% for x in [] %}x{% else %}empty{% endfor %}") == "empty");
  CHECK(Render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
               "{{ loop.first }}{{ loop.last }}{{ loop.length }}{% if not loop.last %},{% endif %}{% endfor %}") ==
        "1032TrueFalse3,2121FalseFalse3,3210FalseTrue3");
  CHECK(Render("{% for x in [1, 2, 3] %}{{ loop.previtem | default('-') }}{{ loop.nextitem | default('-') }} "
               "{% endfor %}") == "-2 13 2- ");
  CHECK(Render("{% for x in [1, 2, 3, 4, 5] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}"
               "{% endif %}{{ x }}{% endfor %}") == "13");
  CHECK(Render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %}") == "2/2 4/2 ");
  CHECK(Render("{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ loop.index }}|"
               "{% endfor %}") == "1x1 1y2 1|2x1 2y2 2|");
  CHECK(Render("{% for k, v in {'a': 1, 'b': 2} | items %}{{ k }}={{ v }} {% endfor %}") == "a=1 b=2 ");
  CHECK(Render("{% for x in undefined_list %}x{% else %}none{% endfor %}") == "none");
}

TEST_CASE("jinja: set, scoping, namespace and macros") {
  // A set inside a loop does not leak out of it; a namespace attribute does.
  CHECK(Render("{% set x = 1 %}{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set x = i %}"
               "{% set ns.n = ns.n + i %}{% endfor %}{{ x }} {{ ns.n }}") == "1 6");
  CHECK(Render("{% if true %}{% set y = 'set in if' %}{% endif %}{{ y }}") == "set in if");
  CHECK(Render("{% set a, b = [1, 2] %}{{ b }}{{ a }} {% set t = 1, 2 %}{{ t }}") == "21 [1, 2]");
  CHECK(Render("{% set block %}\n  inside {{ 1 + 1 }}\n{% endset %}[{{ block }}]") == "[  inside 2\n]");
  CHECK(Render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
               "{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }} [{{ greet() }}]") ==
        "Hi A! Hi B? Hi C. [Hi !]");
  CHECK(Render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}") == "321");
  CHECK(Render("{% set ns = namespace() %}{% set ns.found = true %}{{ ns.found }} {{ dict(a=1, b='x') | tojson }}") ==
        "True {\"a\": 1, \"b\": \"x\"}");
  CHECK(Render("{{ range(3) | list }} {{ range(1, 7, 2) | join(',') }} {{ range(3, 0, -1) | list }}") ==
        "[0, 1, 2] 1,3,5 [3, 2, 1]");
  CHECK(Render("{% generation %}kept{% endgeneration %}") == "kept");
}

TEST_CASE("jinja: filters") {
  const JinjaValue::Dict vars = {
      {"msgs", Json(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U1"},
                        {"role": "user", "content": "U2"}])")}};
  CHECK(Render("[{{ '  a  ' | trim }}] [{{ 'xxax' | trim('x') }}] {{ 'aB' | upper }} {{ 'aB' | lower }} "
               "{{ 'hELLO wORLD' | capitalize }} {{ 'a b' | title }}") == "[a] [a] AB ab Hello world A B");
  CHECK(Render("{{ [1, 2] | length }} {{ 'abc' | count }} {{ {'a': 1} | length }} {{ nothing | length }}") ==
        "2 3 1 0");
  CHECK(Render("{{ nothing | default('d') }} {{ '' | default('d') }} {{ '' | d('d', true) }} {{ none | default(1) }}") ==
        "d  d None");
  CHECK(Render("{{ [1, 2, 3] | join }} {{ [1, 2, 3] | join(', ') }} {{ msgs | join('|', attribute='role') }}", vars) ==
        "123 1, 2, 3 system|user|user");
  CHECK(Render("{{ [4, 5] | first }} {{ [4, 5] | last }} {{ 'xy' | first }} {{ [] | first is defined }}") ==
        "4 5 x False");
  CHECK(Render("{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 12 | string ~ 'x' }}") ==
        "bbb bba 12x");
  CHECK(Render("{{ '42' | int }} {{ ' 7 ' | int }} {{ '3.9' | int }} {{ 'x' | int }} {{ 'x' | int(5) }} {{ 2.7 | int }} "
               "{{ '0x1A' | int(0, 16) }} {{ '1.5' | float }} {{ 2 | float }} {{ -3 | abs }} {{ 2.567 | round(2) }}") ==
        "42 7 3 0 5 2 26 1.5 2.0 3 2.57");
  CHECK(Render("{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} "
               "{{ [1, 2, 1, 3] | unique | list }} {{ [1, 2] | reverse | list }} {{ 'abc' | reverse }}") ==
        "[1, 2, 3] ['A', 'b', 'c'] [3, 2, 1] [1, 2, 3] [2, 1] cba");
  CHECK(Render("{{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ [1, 2.5] | sum }} {{ 'a b  c' | wordcount }}") ==
        "1 3 3.5 3");
  CHECK(Render("{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }} "
               "{{ msgs | rejectattr('role', 'eq', 'user') | list | length }} {{ [1, 2, 3, 4] | select('odd') | list }} "
               "{{ [1, 0, 2] | select | list }} {{ [1, 2, 3] | reject('in', [2]) | list }} "
               "{{ ['a', 'b'] | map('upper') | list }}",
               vars) == "U1,U2 1 [1, 3] [1, 2] [1, 3] ['A', 'B']");
  CHECK(Render("{% for k, v in {'b': 1, 'a': 2} | dictsort %}{{ k }}{{ v }}{% endfor %} "
               "{{ {'x': 1} | items | list | length }} {{ 'a\\nb' | indent(2) }}|{{ 'a\\n\\nb' | indent(2, true, true) }}") ==
        "a2b1 1 a\n  b|  a\n  \n  b");
  CHECK(Render("{{ '<a & \"b\">' | e }} {{ '<x>' | safe }} {{ msgs[0] | attr('role') }}", vars) ==
        "&lt;a &amp; &#34;b&#34;&gt; <x> system");
}

TEST_CASE("jinja: tojson matches Python's json.dumps as transformers calls it") {
  const JinjaValue::Dict vars = {
      {"v", Json(R"({"s": "h\u00e9 \"q\" \\ \n\t\u0001 \ud83d\ude00", "n": null, "b": false, "i": -3, "f": 2.0,
                     "g": 1e-7, "l": [], "d": {}, "nested": [1, {"z": [true]}]})")}};
  CHECK(Render("{{ v | tojson }}", vars) ==
        "{\"s\": \"h\xc3\xa9 \\\"q\\\" \\\\ \\n\\t\\u0001 \xf0\x9f\x98\x80\", \"n\": null, \"b\": false, \"i\": -3, "
        "\"f\": 2.0, \"g\": 1e-07, \"l\": [], \"d\": {}, \"nested\": [1, {\"z\": [true]}]}");
  CHECK(Render("{{ v.nested | tojson(indent=2) }}", vars) == "[\n  1,\n  {\n    \"z\": [\n      true\n    ]\n  }\n]");
  CHECK(Render("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=(',', ':')) }} {{ 'é😀' | tojson(ensure_ascii=true) }}") ==
        "{\"a\":2,\"b\":1} \"\\u00e9\\ud83d\\ude00\"");
}

TEST_CASE("jinja: tests") {
  CHECK(Render("{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 1 is number }} {{ 1.0 is float }} "
               "{{ 1 is integer }} {{ true is boolean }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} "
               "{{ 'a' is iterable }} {{ [] is sequence }} {{ range is callable }}") ==
        "False True True True True True True True True True True True True");
  CHECK(Render("{{ 4 is even }} {{ 4 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 1 is eq 1 }} "
               "{{ 1 is ne 1 }} {{ 2 is gt 1 }} {{ 2 is lt 1 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 2 is in [1, 2] }} "
               "{{ 'ab' is lower }} {{ 'AB' is upper }} {{ true is true }} {{ 0 is false }} {{ none is sameas none }}") ==
        "True False True False True False True False True False True True True True False True");
  CHECK(Render("{{ 'a' is not string }} {{ not 'a' is string }} {{ x is not defined and 1 }}") == "False False 1");
}

TEST_CASE("jinja: raise_exception and strftime_now") {
  const absl::Status s = Error("ok\n  {{ raise_exception('Roles must alternate') }}");
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("t.jinja:2:") && Catch::Contains("Roles must alternate"));
  JinjaRenderOptions o;
  o.now = [] {
    std::tm tm{};
    tm.tm_year = 2025 - 1900;
    tm.tm_mon = 2;
    tm.tm_mday = 5;
    tm.tm_hour = 14;
    tm.tm_min = 7;
    tm.tm_wday = 3;
    return tm;
  };
  CHECK(Render("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M %A %B') }}", {}, o) ==
        "05 Mar 2025|2025-03-05 14:07 Wednesday March");
  // Without an injected clock it is today's date: 11 characters like "05 Mar 2025".
  CHECK(Render("{{ strftime_now('%d %b %Y') | length }}") == "11");
}

TEST_CASE("jinja: errors name the template, line and column") {
  auto message = [](const absl::Status& s) { return std::string(s.message()); };
  SECTION("syntax errors") {
    absl::Status s = Error("line one\n{{ 1 + }}");
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(message(s), Catch::StartsWith("t.jinja:2:8: ") && Catch::Contains("'}}'"));
    s = Error("{% for x in y %}\n{{ x }}");
    CHECK_THAT(message(s), Catch::StartsWith("t.jinja:2:") && Catch::Contains("'endfor'") &&
                               Catch::Contains("1:4"));
    CHECK_THAT(message(Error("{{ 'abc }}")), Catch::StartsWith("t.jinja:1:4: ") && Catch::Contains("string"));
    CHECK_THAT(message(Error("ab {{ x")), Catch::StartsWith("t.jinja:1:4: ") && Catch::Contains("'}}'"));
    CHECK_THAT(message(Error("{# open")), Catch::Contains("comment"));
    CHECK_THAT(message(Error("{% frobnicate %}")), Catch::Contains("unknown tag 'frobnicate'"));
    CHECK_THAT(message(Error("{% break %}")), Catch::Contains("outside of a loop"));
    CHECK_THAT(message(Error("{{ a $ b }}")), Catch::Contains("unexpected character '$'"));
    CHECK_THAT(message(Error("{% if x %}a{% endfor %}")), Catch::Contains("'else' or 'elif' or 'endif'") ||
                                                              Catch::Contains("'elif' or 'else' or 'endif'"));
  }
  SECTION("unsupported constructs are kUnimplemented") {
    absl::Status s = Error("{% extends 'base.html' %}");
    CHECK(s.code() == absl::StatusCode::kUnimplemented);
    CHECK_THAT(message(s), Catch::StartsWith("t.jinja:1:4: "));
    s = Error("ok\n{% if false %}{{ x | frobnicate }}{% endif %}");  // rejected even in a branch never taken
    CHECK(s.code() == absl::StatusCode::kUnimplemented);
    CHECK_THAT(message(s), Catch::StartsWith("t.jinja:2:") && Catch::Contains("filter 'frobnicate'"));
    CHECK(Error("{{ x is frobnicated }}").code() == absl::StatusCode::kUnimplemented);
    CHECK(Error("{% for x in y recursive %}{% endfor %}").code() == absl::StatusCode::kUnimplemented);
    CHECK(Error("{{ '%s' % 1 }}").code() == absl::StatusCode::kUnimplemented);
  }
  SECTION("runtime errors") {
    absl::Status s = Error("{{ messages[0].content }}");
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(message(s), Catch::StartsWith("t.jinja:1:") && Catch::Contains("'messages' is undefined"));
    s = Error("\n\n   {{ d.a.b.c }}", {{"d", Json("{}")}});
    CHECK_THAT(message(s), Catch::StartsWith("t.jinja:3:") && Catch::Contains("'dict object' has no attribute 'a'"));
    CHECK_THAT(message(Error("{{ 'a' + 1 }}")), Catch::Contains("unsupported operand type(s) for +: 'str' and 'int'"));
    CHECK_THAT(message(Error("{{ 1 / 0 }}")), Catch::Contains("division by zero"));
    CHECK_THAT(message(Error("{{ 1 < 'a' }}")), Catch::Contains("'<' not supported"));
    CHECK_THAT(message(Error("{% for x in 3 %}{% endfor %}")), Catch::Contains("'int' object is not iterable"));
    CHECK_THAT(message(Error("{% set a, b = [1] %}")), Catch::Contains("not enough values to unpack"));
    CHECK_THAT(message(Error("{% set x = 1 %}{% set x.y = 2 %}")), Catch::Contains("not a namespace"));
    CHECK_THAT(message(Error("{{ 5() }}")), Catch::Contains("'int' object is not callable"));
    CHECK_THAT(message(Error("{{ {'a': 1} | items | tojson }}{{ range | tojson }}")),
               Catch::Contains("not JSON serializable"));
    CHECK_THAT(message(Error("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}")), Catch::Contains("recursed"));
  }
}

TEST_CASE("jinja: Python float formatting") {
  CHECK(PythonFloatRepr(1.0) == "1.0");
  CHECK(PythonFloatRepr(0.1) == "0.1");
  CHECK(PythonFloatRepr(-2.5) == "-2.5");
  CHECK(PythonFloatRepr(1e16) == "1e+16");
  CHECK(PythonFloatRepr(1e15) == "1000000000000000.0");
  CHECK(PythonFloatRepr(123456789.125) == "123456789.125");
  CHECK(PythonFloatRepr(1e-5) == "1e-05");
  CHECK(PythonFloatRepr(0.0001) == "0.0001");
  CHECK(PythonFloatRepr(1.5e-10) == "1.5e-10");
  CHECK(PythonFloatRepr(0.0) == "0.0");
  CHECK(PythonFloatRepr(1.0 / 0.0) == "inf");
}

}  // namespace
}  // namespace verl
