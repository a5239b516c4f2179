"""The tag's renamer (tag/mangle.py): renames declared names, never properties or strings."""

import shutil
import subprocess

import pytest
import rjsmin

from tag.mangle import ManglerError, declared_names, mangle, tokenize


def sig(src):
    return [t for t in tokenize(src) if t[0] != "ws"]


def test_declared_names_cover_every_binding_form():
    src = (
        "const a=1;let b;function f(c,{d,e:g},[h]){}"
        "const k=(m)=>m;const n=p=>p;try{}catch(q){}for(const[r,s]of t){}"
    )
    assert declared_names(sig(src)) == {"a", "b", "f", "c", "d", "g", "h", "k", "m", "n", "p",
                                        "q", "r", "s"}  # fmt: skip


def test_properties_strings_and_globals_are_untouched():
    src = 'const longName=document.title;function useIt(){return longName.length+"longName"}'
    out = mangle(src)
    assert "document.title" in out and ".length" in out and '"longName"' in out
    assert "longName=" not in out and "useIt" not in out


def test_shorthand_properties_keep_their_keys():
    out = mangle("function f(slot,id){return{slot,id,x:slot}}")
    assert "{slot:" in out and ",id:" in out and ",x:" in out


def test_destructuring_keeps_keys_and_renames_bindings():
    out = mangle("function f({slot,post}){return slot+post}")
    assert "{slot:" in out and ",post:" in out and "slot+post" not in out


def test_arrays_inside_objects_are_not_shorthand():
    out = mangle("const limit=1;const o={t:[0,limit,2]};")
    assert "[0,limit" not in out and ":limit" not in out


def test_keys_before_colons_and_ternaries():
    out = mangle("const value=1;const o={value:value?value:2};")
    assert "{value:" in out and ":value?" not in out


def test_regex_and_division():
    out = mangle('const total=4;const half=total/2;const re=/a\\/b[/]/g;"x".replace(re,"")')
    assert "/2" in out and "/a\\/b[/]/g" in out


def test_short_names_never_shadow_globals_or_keywords():
    names = " ".join(f"const name{i}={i};" for i in range(60))
    out = mangle(names + "const q=a+b;")  # a and b are globals here: never reused
    assert "a+b" in out
    for kw in ("do", "if", "in"):
        assert f"let {kw}=" not in out and f",{kw}=" not in out


def test_const_becomes_let_and_consecutive_declarations_are_merged():
    assert mangle("const first=1;const second=2;") == "let a=1,b=2;"
    assert mangle("let first=1;let second;") == "let a=1,b;"
    assert mangle("let first=1;const second=2;let third;") == "let a=1,b=2,c;"
    assert mangle("for(const item of list)use(item);") == "for(let a of list)use(a);"
    assert mangle("x.const=1;").startswith("x.const=")  # a property named const stays
    # Not across blocks or statements of another kind.
    assert mangle("const a1=1;if(a1){const b1=2;g(b1)}const c1=3;g(c1);").count("let") == 3


def test_line_breaks_after_a_statement_go_and_after_an_expression_stay():
    src = rjsmin.jsmin("function f() {\n  g();\n}\nlet x = {k: 1}\nf();\n")
    assert src.count("}\n") == 2  # rjsmin keeps them
    # After a function declaration's body, a line break changes nothing; after an object
    # literal (no ";"), it ends the statement.
    assert mangle(src) == "function a(){g()}let b={k:1}\na();"
    for block in ("if(x){y()}", "for(;;){y()}", "try{y()}catch(e){z()}", "{y()}"):
        assert mangle(block + "\nz();") == block.replace("(e)", "(a)") + "z();", block
    for expression in ("f=()=>{}", "f=function(){}", "f=function g(){}", "f=(function(){})"):
        assert "\n" in mangle(expression + "\nz();"), expression
    # A line break before ++, --, or an HTML-like comment (-->) stays.
    assert mangle("if(x){y()}\n++z;") == "if(x){y()}\n++z;"
    assert mangle("if(x){y()}\n-->z") == "if(x){y()}\n-->z"
    # After anything but a "}" (a "return" above all), a line break is never touched.
    assert mangle("function f(){return\n1}") == "function a(){return\n1}"


def test_tidying_keeps_meaning():
    out = mangle("const f=(item)=>item;if(true){g(false);}")
    assert "=a=>a" in out or "=b=>b" in out, out  # (x)=> loses its parentheses
    assert "if(!0)" in out and "g(!1)}" in out  # booleans shortened, ";" before "}" dropped
    assert mangle("x.true=1;").startswith("x.true")  # a property named true stays
    # The empty statement of a control header keeps its ";".
    assert mangle("function f(){if(x);}") == "function a(){if(x);}"
    assert mangle("function f(){while(x());}").endswith("while(x());}")


def test_an_object_after_throw_is_an_object():
    out = mangle("function f(message){throw{code:1,message:message}}")
    assert "{code:1,message:" in out


@pytest.mark.parametrize(
    "src", ["const a=`x${1}`;", "function f({a=1}){}", "function f(){const location=1}"]
)
def test_unsupported_constructs_fail_loudly(src):
    with pytest.raises(ManglerError):
        mangle(src)


def test_bindings_that_never_meet_share_a_short_name():
    # The parameters of two functions, and the locals of two blocks, can never see each
    # other: one short name serves both, so the minified functions look alike.
    out = mangle("function f(alpha){return alpha}function g(beta){return beta}")
    assert out.count("(a){return a}") == 2, out
    out = mangle("if(x){const left=1;y(left)}else{const right=2;y(right)}")
    assert out.count("let a=") == 2, out


def test_a_short_name_never_shadows_a_binding_used_inside():
    out = mangle("const outer=1;function f(param){return outer+param}")
    outer = out.split("let ")[1].split("=")[0]
    param = out.split("(")[1].split(")")[0]
    assert outer != param, out
    # A concise arrow body ends at the "," of an argument list or the ";" of its statement:
    # past it, the parameter's short name is free for the outer binding again.
    assert mangle("const keep=1;const f=g((x)=>x,keep);") == "let a=1,b=g(a=>a,a);"
    assert mangle("const keep=1;const f=(x)=>x;const after=keep;") == "let a=1,b=a=>a,c=a;"


def test_names_outside_their_scope_and_var_fail_loudly():
    with pytest.raises(ManglerError, match="outside the scope"):
        mangle("function f(){const inner=1}g(inner);")
    with pytest.raises(ManglerError, match="var"):
        mangle("var old=1;")


SHADOWING = """
const log = [];
const outer = 3;
function twice(value) { return value * 2; }
function add(first, second) { return first + second + outer; }
function loop(items) {
  const out = [];
  for (const item of items) {
    const doubled = twice(item);
    const items2 = [doubled];
    out.push(...items2.map((x) => add(x, outer)));
  }
  try { throw new Error("e"); } catch (err) { out.push(err.message); }
  return out;
}
const pick = (flag) => (flag ? (left) => left + outer : (right) => right - outer);
const obj = { outer, twice: twice(outer) };
log.push(loop([1, 2]), pick(true)(10), pick(false)(10), obj, [5].map((v, i) => v + i));
console.log(JSON.stringify(log));
"""


def test_minified_code_computes_what_the_source_computes(tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (the machines and CI have Node 20)")
    results = []
    for name, code in (("source.js", SHADOWING), ("mangled.js", mangle(rjsmin.jsmin(SHADOWING)))):
        path = tmp_path / name
        path.write_text(code)
        done = subprocess.run([node, str(path)], capture_output=True, text=True, check=True)
        results.append(done.stdout)
    assert results[0] == results[1] and results[0].startswith("[[8,"), results
