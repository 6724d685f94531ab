#!/usr/bin/env python3
"""Until a GPU run is recorded, every place that offers `cuda` says that the
CUDA backend has not yet run on a GPU.

usage: check_gpu_status.py RINGKV REPO_ROOT [--self-test]

A GPU run is recorded when bench/gpu/h200.jsonl exists (scripts/gpu_check.sh
keeps the GPU bench's rows there); then the check passes at once and the
sentences may go. Until then, each place below that offers cuda must hold
the words "not yet run on a GPU" (case and line breaks aside):
  - the help texts: `ringkv help` wherever it names cuda, and every
    command's --help that offers the choice (`cpu|cuda`);
  - the Markdown docs (README.md, python/README.md, docs/*.md): each
    section (a `##` heading up to the next; headings in code blocks aside)
    that offers cuda, unless the document's opening (its title and what
    comes before the first `##` heading) holds the words for the whole
    document; and, opening or not, each heading of any level that offers
    cuda in its own words, in its text up to the next heading;
  - the Python docstrings: of the package's public modules and of what it
    exports (ringkv.__all__: the classes and functions, their public
    methods), and every docstring and argparse help= text of examples/*.py
    (an option with the choice or default "cuda" needs a help= saying it),
    each one that offers cuda (help(ringkv.Model) shows the class's
    docstring only, so each carries its own);
  - the public headers (include/*.h): the opening comment of one that
    declares a CUDA call (a function named rkv_..cuda..);
  - the `RKV_CUDA` build option's description (CMakeLists.txt).
"Offers" is one of: the choice `cpu|cuda` or `cpu or cuda`, `--backend
cuda` (not "--backend cuda where no GPU is seen": that is a refusal),
`--device cuda`, `device="cuda"` (or 'cuda', "cuda:N", torch.device("cuda")),
a CUDA creation call (`rkv_model_create_cuda`, `rkv_cuda_layer_create`),
the Hopper kernel's switch `RKV_CUDA_ATTN_KERNEL`. --self-test also checks
that a made-up section offering cuda without the words is reported.
Python standard library only.
"""
import ast
import glob
import os
import re
import subprocess
import sys
import tempfile

RECORD = os.path.join("bench", "gpu", "h200.jsonl")
WORDS = "not yet run on a GPU"
OFFER = re.compile(
    r"cpu\s*\|\s*cuda|cpu or cuda|--backend[ =]cuda(?! where no GPU)|--device[ =]cuda"
    r"|device\s*=\s*[\"']cuda|[\"']cuda(?::\d+|:N)?[\"']|torch\.device\(\s*[\"']cuda"
    r"|rkv_model_create_cuda|rkv_cuda_layer_create|RKV_CUDA_ATTN_KERNEL", re.I)


def says(text):
    """Whether text holds the words (line breaks, spaces and Markdown
    emphasis aside)."""
    flat = " ".join(text.replace("*", "").replace("`", "").split())
    return WORDS.lower() in flat.lower()


def offers(text):
    m = OFFER.search(" ".join(text.split()))
    return m.group(0) if m else None


def markdown_places(path, text):
    """[(place, what offered)] of the sections of one Markdown text that
    offer cuda without the words, and of the headings (any level) that
    offer it in their own words without the words before the next heading
    (whatever the opening says)."""
    sections, title, lines, fence = [], "(opening)", [], False
    headed, heading = [], None  # [(heading, its text up to the next heading)]
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        if not fence and line.startswith("#"):
            if heading:
                headed.append((heading[0], "\n".join(heading[1])))
            heading = (line.strip(), [])
        if heading:
            heading[1].append(line)
        if not fence and line.startswith("## "):
            sections.append((title, "\n".join(lines)))
            title, lines = line.strip(), []
        lines.append(line)
    sections.append((title, "\n".join(lines)))
    if heading:
        headed.append((heading[0], "\n".join(heading[1])))
    out = [(f"{path}: heading {h!r}", offers(h)) for h, body in headed
           if offers(h) and not says(body)]
    if says(sections[0][1]):
        return out  # the opening speaks for the whole document's sections
    for title, body in sections:
        o = offers(body)
        if o and not says(body):
            out.append((f"{path}: section {title!r}", o))
    return out


def python_places(path, exported=None):
    """[(place, what offered)] of the docstrings and help= texts of one
    Python file that offer cuda without the words. exported (a set of
    names): a package module, whose docstring counts when the module is
    public and whose classes and functions count when the package exports
    them (their public methods too); None: every docstring (an example)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    texts, nodes = [], []
    public_module = not os.path.basename(path).startswith("_") or \
        os.path.basename(path) == "__init__.py"
    if exported is None:
        nodes = [n for n in ast.walk(tree)
                 if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                   ast.AsyncFunctionDef))]
    else:
        if public_module:
            nodes.append(tree)
        for top in tree.body:
            if isinstance(top, (ast.ClassDef, ast.FunctionDef)) and top.name in exported:
                nodes.append(top)
                nodes += [m for m in getattr(top, "body", [])
                          if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                          and not m.name.startswith("_")]
    for node in nodes:
        doc = ast.get_docstring(node, clean=False)
        if doc:
            name = "module" if isinstance(node, ast.Module) else node.name
            texts.append((f"{path}: docstring of {name} (line {getattr(node, 'lineno', 1)})",
                          doc))
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        helps = [kw.value.value for kw in node.keywords if kw.arg == "help"
                 and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str)]
        for h in helps:
            texts.append((f"{path}: help= text (line {node.lineno})", h))
        # an option whose choices (or default) offer cuda: its help says it
        choice = any(isinstance(c, ast.Constant) and c.value == "cuda"
                     for kw in node.keywords if kw.arg in ("choices", "default")
                     for c in ([kw.value] + list(getattr(kw.value, "elts", []))))
        if choice and not any(says(h) for h in helps):
            out.append((f"{path}: the option of line {node.lineno} (choices or default "
                        f"'cuda', no help= saying it)", "cuda"))
    return out + [(place, o) for place, t in texts if (o := offers(t)) and not says(t)]


def package_exports(init):
    """ringkv.__all__, read from the package's __init__.py."""
    for node in ast.parse(open(init, encoding="utf-8").read()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                                for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def header_places(path):
    """A header that declares a CUDA call (a function whose name holds
    "cuda", outside comments) says it in its opening comment."""
    text = open(path, encoding="utf-8").read()
    m = re.match(r"\s*/\*.*?\*/", text, re.S)
    opening = m.group(0) if m else ""
    code = re.sub(r"//[^\n]*", " ", re.sub(r"/\*.*?\*/", " ", text, flags=re.S))
    d = re.search(r"\b(rkv_\w*cuda\w*)\s*\(", code)
    if d and not says(opening):
        return [(f"{path}: the opening comment", d.group(1))]
    return []


def help_places(ringkv):
    out = []
    cmds = [[], ["rollout"], ["replay"], ["plan"], ["bench"], ["inspect"], ["version"]]
    for cmd in cmds:
        p = subprocess.run([ringkv, "help"] + cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        if p.returncode != 0:
            out.append((f"ringkv help {' '.join(cmd)}", f"exit status {p.returncode}"))
            continue
        # `ringkv help` itself: any mention of cuda (its exit rule names
        # --backend cuda)
        offer = r"cuda" if not cmd else r"cpu\s*\|\s*cuda|cpu or cuda"
        if re.search(offer, p.stdout) and not says(p.stdout):
            out.append((f"ringkv help {' '.join(cmd)}".strip(), "cpu|cuda"))
    return out


def cmake_places(root):
    text = open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8").read()
    m = re.search(r'option\(RKV_CUDA\s+"([^"]*)"', text)
    if m and not says(m.group(1)):
        return [("CMakeLists.txt: option(RKV_CUDA ...)", "the build option")]
    return []


def places(ringkv, root):
    docs = [os.path.join(root, "README.md"), os.path.join(root, "python", "README.md")]
    docs += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    out = help_places(ringkv)
    for d in docs:
        out += markdown_places(os.path.relpath(d, root), open(d, encoding="utf-8").read())
    package = sorted(glob.glob(os.path.join(root, "python", "ringkv", "*.py")))
    exported = package_exports(os.path.join(root, "python", "ringkv", "__init__.py"))
    examples = sorted(glob.glob(os.path.join(root, "examples", "*.py")))
    pys = package + examples
    for f in pys:
        found = python_places(f, exported if f in package else None)
        out += [(os.path.relpath(f, root) + p[len(f):], o) for p, o in found]
    for h in sorted(glob.glob(os.path.join(root, "include", "*.h"))):
        out += [(os.path.relpath(h, root) + p[len(h):], o) for p, o in header_places(h)]
    return out + cmake_places(root), len(docs) + len(pys)


def self_test():
    bad = markdown_places("made-up.md", "# T\n\nintro\n\n## GPU\n\nUse `--backend cuda` now.\n\n"
                                        "## CPU\n\nThe CPU only; `--backend cuda where no GPU is "
                                        "seen` exits 2.\n")
    good = markdown_places("made-up.md", "# T\n\nThe CUDA backend has not yet run\non a GPU.\n\n"
                                         "## GPU\n\n`device=\"cuda\"`\n")
    headed = markdown_places("made-up.md", "# T\n\nThe CUDA backend has not yet run\non a GPU."
                                           "\n\n## GPU\n\n### `device=\"cuda\"`\n\nFast.\n")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as t:
        t.write('"""A module."""\ndef f(device="cpu"):\n    """device: "cpu" or "cuda"."""\n')
    try:
        py = python_places(t.name)
    finally:
        os.unlink(t.name)
    ok = ([p for p, _ in bad] == ["made-up.md: section '## GPU'"] and good == []
          and [p for p, _ in headed] == ["made-up.md: heading '### `device=\"cuda\"`'"]
          and len(py) == 1 and "docstring of f" in py[0][0])
    if not ok:
        print(f"FAIL: self-test: {bad!r}, {good!r}, {headed!r}, {py!r}")
    return ok


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        raise SystemExit(__doc__)
    ringkv, root = os.path.abspath(args[0]), os.path.abspath(args[1])
    if "--self-test" in args and not self_test():
        raise SystemExit(1)
    if os.path.exists(os.path.join(root, RECORD)):
        print(f"PASS: a GPU run is recorded ({RECORD}): the places offering cuda need not say "
              f"'{WORDS}' any more")
        return
    bad, n = places(ringkv, root)
    for place, what in bad:
        print(f"FAIL: {place} offers cuda ({what!r}) without saying the CUDA backend has "
              f"'{WORDS}' ({RECORD} does not exist)")
    if bad:
        raise SystemExit(1)
    print(f"PASS: every place offering cuda says '{WORDS}' (help texts, {n} documents and "
          f"Python files, headers, the build option)")


if __name__ == "__main__":
    main()
