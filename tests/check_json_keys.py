#!/usr/bin/env python3
"""Every `--json` key of `ringkv plan`, `inspect` and `rollout` against docs/json.md.

usage: check_json_keys.py RINGKV DOCS_JSON_MD [--image PATH]

Runs plan (every preset, and --full-global-ring), rollout (3 demo frames
with --snapshot-out, then 2 resumed; with --migrate-every, whose figures
must add up), inspect of the snapshot and of a
truncated copy, and checks each object against the doc's tables:
  - every key path printed is listed for that command (no undocumented key);
  - every listed path is printed (unless an object above it is null);
  - every value has the listed type (integer or number or ..., "or null");
  - every key name is in the vocabulary table, and none of the words the
    vocabulary replaced ("instead of": index, class, model, ...) appears;
  - plan, inspect and rollout's geometry describe a model with the same keys
    and values (the same preset printed three ways must agree);
  - paths that are not UTF-8 (rollout --out and --snapshot-out, inspect of a
    valid and a cut file) still give valid JSON, each ill-formed part
    replaced by U+FFFD, as Python's decode("utf-8", "replace").
Python standard library only.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

MODEL = "*(model)*"


def parse_doc(path):
    """{section: [(path, type)]}, vocabulary {key}, banned {word}."""
    sections, vocab, banned = {}, set(), set()
    section = None
    in_vocab = False
    inspect_tables = 0
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("## "):
            title = line[3:].strip()
            in_vocab = title == "Vocabulary"
            m = re.match(r"`ringkv (\w+) --json`", title)
            section = m.group(1) if m else ("model" if title == "The model description" else None)
            inspect_tables = 0
            continue
        if not line.startswith("| ") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in ("key", "path", "command"):
            if section == "inspect" and cells[0] == "path":
                inspect_tables += 1
            continue
        if in_vocab:
            vocab.update(re.findall(r"`([a-z0-9_]+)`", cells[0]))
            banned.update(re.findall(r"`([a-z0-9_]+)`", cells[2]) if len(cells) > 2 else [])
            continue
        if section is None:
            continue
        name = section
        if section == "inspect":
            name = "inspect" if inspect_tables <= 1 else "inspect_invalid"
        raw = cells[0]
        if MODEL in raw:
            prefix = re.sub(r"[`\s]", "", raw.replace(MODEL, ""))
            sections.setdefault(name, []).append((prefix + MODEL, None))
            continue
        m = re.fullmatch(r"`([^`]+)`", raw)
        if not m:
            raise SystemExit(f"FAIL: docs/json.md: cannot read the row {line!r}")
        sections.setdefault(name, []).append((m.group(1), cells[1]))
    return sections, vocab, banned


def expand(rows, model_rows):
    """The table's paths with the model description spliced in: {path: type}."""
    out = {}
    for path, typ in rows:
        if path.endswith(MODEL):
            prefix = path[: -len(MODEL)]
            for mp, mt in model_rows:
                out[prefix + mp] = mt
        else:
            out[path] = typ
    return out


def json_type_ok(value, typ):
    allowed = [t.strip() for t in typ.split(" or ")]
    for t in allowed:
        if t == "null" and value is None:
            return True
        if t == "string" and isinstance(value, str):
            return True
        if t == "boolean" and isinstance(value, bool):
            return True
        if t == "integer" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if t == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if t == "object" and isinstance(value, dict):
            return True
        if t == "array" and isinstance(value, list):
            return True
    return False


def walk(value, path=""):
    """(path, value, key) of every key below value; arrays as path[]."""
    if isinstance(value, dict):
        for k, v in value.items():
            p = f"{path}.{k}" if path else k
            yield p, v, k
            yield from walk(v, p)
    elif isinstance(value, list):
        for v in value:
            yield path + "[]", v, None
            yield from walk(v, path + "[]")


def check(what, obj, spec, vocab, banned, failures):
    seen = {}
    for path, value, key in walk(obj):
        seen.setdefault(path, []).append(value)
        if key is not None:
            if key in banned:
                failures.append(f"{what}: key {path!r}: {key!r} is a word the vocabulary replaced")
            elif key not in vocab:
                failures.append(f"{what}: key {path!r}: {key!r} is not in the vocabulary")
        if path not in spec:
            failures.append(f"{what}: key {path!r} is not documented for this command")
        elif not json_type_ok(value, spec[path]):
            failures.append(f"{what}: {path!r} = {value!r:.80} is not {spec[path]}")
    for path in spec:
        if path in seen:
            continue
        # absent: allowed only below a null (or empty) parent
        parts = re.split(r"\.", path)
        parent_null = False
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            vals = seen.get(parent, seen.get(parent.removesuffix("[]"), None))
            if vals is not None and all(v is None or v == [] for v in vals):
                parent_null = True
                break
        if not parent_null:
            failures.append(f"{what}: documented key {path!r} is missing")
    return seen


def run_json(cmd, status=0, lines=False, stderr=None):
    """The JSON printed; with stderr (a list), the stderr text is appended."""
    print("running:", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != status:
        sys.stderr.write(p.stderr[-2000:])
        raise SystemExit(f"FAIL: exit status {p.returncode} (expected {status}): {' '.join(cmd)}")
    if stderr is not None:
        stderr.append(p.stderr)
    if lines:
        return [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    return json.loads(p.stdout)


MODEL_KEYS = ("preset", "dtype", "n_layers", "n_q_heads", "n_kv_heads", "d_head",
              "tokens_per_frame", "layers")


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        raise SystemExit(__doc__)
    ringkv, doc = args[0], args[1]
    img = args[2:]
    sections, vocab, banned = parse_doc(doc)
    for need in ("model", "plan", "inspect", "inspect_invalid", "rollout"):
        if need not in sections:
            raise SystemExit(f"FAIL: docs/json.md has no table for {need}")
    model_rows = sections["model"]
    spec = {k: expand(v, model_rows) for k, v in sections.items() if k != "model"}
    if not banned >= {"index", "class", "model", "per_session_bytes"}:
        raise SystemExit(f"FAIL: the vocabulary no longer bans the old words: {sorted(banned)}")
    failures = []
    objects = 0
    with tempfile.TemporaryDirectory(prefix="rkv-json-") as tmp:
        plans = {}
        presets = subprocess.run([ringkv, "plan", "--help"], stdout=subprocess.PIPE,
                                 text=True).stdout
        names = re.search(r"--preset NAME\s+model preset:\s*(.*)", presets).group(1).split()
        for name in names:
            for extra in ([], ["--full-global-ring"]):
                j = run_json([ringkv, "plan", "--preset", name, "--memory-gib", "8", "--json"]
                             + extra)
                check(f"plan {name} {' '.join(extra)}", j, spec["plan"], vocab, banned, failures)
                plans[(name, bool(extra))] = j
                objects += 1
        snap = os.path.join(tmp, "s.safetensors")
        r1 = run_json([ringkv, "rollout", "--frames", "3", "--json", "--out",
                       os.path.join(tmp, "a"), "--snapshot-out", snap] + img)
        r2 = run_json([ringkv, "rollout", "--frames", "2", "--json", "--out",
                       os.path.join(tmp, "b"), "--resume", snap] + img)
        # --migrate-every: 5 frames, 2 sessions, moved after frames 1 and 3;
        # then 3 frames, 1 session, moved once (the stderr line's singulars)
        err = []
        r3 = run_json([ringkv, "rollout", "--frames", "5", "--sessions", "2", "--json",
                       "--migrate-every", "2", "--out", os.path.join(tmp, "c")] + img)
        r4 = run_json([ringkv, "rollout", "--frames", "3", "--json", "--migrate-every", "2",
                       "--out", os.path.join(tmp, "d")] + img, stderr=err)
        for what, r in (("rollout", r1), ("rollout --resume", r2),
                        ("rollout --migrate-every", r3), ("rollout --migrate-every (1)", r4)):
            check(what, r, spec["rollout"], vocab, banned, failures)
            objects += 1
        for what, r, rounds, sessions in (("r3", r3, 2, 2), ("r4", r4, 1, 1)):
            mg, secs = r.get("migrations") or {}, r["seconds"]
            per = r["memory_bytes"]["per_session"]
            moves = rounds * sessions
            if (mg.get("rounds") != rounds or not isinstance(mg.get("moved_bytes"), int)
                    or mg["moved_bytes"] < moves * per or mg["moved_bytes"] % moves
                    or not 0 < (secs.get("migrating") or 0) <= secs["frame_loop"]):
                failures.append(f"rollout --migrate-every ({what}): migrations {mg!r}, "
                                f"seconds {secs!r} (expected {rounds} rounds, at least "
                                f"{moves} x {per} bytes, a multiple of {moves}, 0 < "
                                f"migrating <= frame_loop)")
        if r1["migrations"] is not None or r1["seconds"]["migrating"] is not None:
            failures.append("rollout without --migrate-every: migrations / seconds.migrating "
                            "not null")
        if "1 migration of 1 session between" not in err[0]:
            failures.append(f"rollout --migrate-every, 1 round of 1 session: stderr "
                            f"{err[0].strip()[-300:]!r} (expected '1 migration of 1 session')")
        ins = run_json([ringkv, "inspect", "--json", snap], lines=True)
        check("inspect", ins[0], spec["inspect"], vocab, banned, failures)
        data = open(snap, "rb").read()
        bad = os.path.join(tmp, "cut.safetensors")
        with open(bad, "wb") as f:
            f.write(data[: len(data) // 2])
        inv = run_json([ringkv, "inspect", "--json", snap, bad], status=1, lines=True)
        if len(inv) != 2 or inv[0].get("valid") is not True or inv[1].get("valid") is not False:
            failures.append(f"inspect of a valid and a cut file: {inv!r:.300}")
        else:
            check("inspect (invalid)", inv[1], spec["inspect_invalid"], vocab, banned, failures)
        objects += 3

        # paths that are not UTF-8 (a file name may hold any byte but NUL):
        # the JSON stays valid UTF-8, each ill-formed part of a string
        # replaced by U+FFFD as Python's decode("utf-8", "replace") does
        # (docs/json.md), in rollout (options.out, options.snapshot_out,
        # picture, legend, saved.file) and inspect (a valid and a cut file)
        btmp = os.fsencode(tmp)
        odd_out, odd_snap = btmp + b"/o\xff", btmp + b"/\xff\xfe.rkv"
        odd_cut = btmp + b"/cut\xe2\x82.\xed\xa0\x80.rkv"  # a cut sequence, a surrogate

        def shown(b):
            return b.decode("utf-8", "replace")

        def odd_json(cmd, status):
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                objs = [json.loads(x) for x in p.stdout.splitlines() if x.strip()] \
                    if cmd[1] == "inspect" else [json.loads(p.stdout)]
            except ValueError as e:  # UnicodeDecodeError included
                failures.append(f"{cmd[1]} --json of non-UTF-8 paths: not JSON: {e} "
                                f"({p.stdout[:200]!r})")
                return None
            if p.returncode != status:
                failures.append(f"{cmd[1]} --json of non-UTF-8 paths: status {p.returncode} "
                                f"(expected {status}): {p.stderr[-300:]!r}")
                return None
            return objs

        print("running: rollout and inspect --json with non-UTF-8 paths", flush=True)
        ro = odd_json([ringkv, "rollout", "--frames", "1", "--json", "--out", odd_out,
                       "--snapshot-out", odd_snap] + img, 0)
        if ro:
            r, o = ro[0], shown(odd_out)
            check("rollout (non-UTF-8 paths)", r, spec["rollout"], vocab, banned, failures)
            objects += 1
            got = (r["options"]["out"], r["options"]["snapshot_out"], r["saved"]["file"],
                   r["picture"], r["legend"])
            want = (o, shown(odd_snap), shown(odd_snap), o + "/rollout.png", o + "/rollout.txt")
            if got != want or "\ufffd" not in o:
                failures.append(f"rollout --json, non-UTF-8 paths: {got!r}, expected {want!r}")
            with open(odd_snap, "rb") as f, open(odd_cut, "wb") as g:
                g.write(f.read()[:1000])
            io = odd_json([ringkv, "inspect", "--json", odd_snap, odd_cut], 1)
            if io and ([x.get("file") for x in io] != [shown(odd_snap), shown(odd_cut)]
                       or [x.get("valid") for x in io] != [True, False]
                       or shown(odd_cut) != tmp + "/cut\ufffd.\ufffd\ufffd\ufffd.rkv"):
                failures.append(f"inspect --json, non-UTF-8 paths: {io!r:.400}")

        # one model, three descriptions: the same keys and values
        plan = plans[("demo", False)]
        trio = {"plan": plan, "inspect": ins[0], "rollout geometry": r1["geometry"]}
        for k in MODEL_KEYS:
            vals = {w: json.dumps(o.get(k), sort_keys=True) for w, o in trio.items()}
            if len(set(vals.values())) != 1:
                failures.append(f"the demo model's {k!r} differs: {vals}")
        # the values say what the vocabulary says
        for l in plan["layers"]:
            want = "local" if l["pinned_dilation"] == 1 else "global"
            if l["kind"] != want:
                failures.append(f"plan: layer {l['layer']} kind {l['kind']!r}, PD "
                                f"{l['pinned_dilation']}")
        if sum(l["memory_bytes"]["per_session"] for l in plan["layers"]) != \
                plan["memory_bytes"]["per_session"]:
            failures.append("plan: the layers' memory_bytes.per_session do not add up")
        if plan["memory_bytes"]["per_session"] != r1["memory_bytes"]["per_session"]:
            failures.append("plan and rollout disagree on memory_bytes.per_session")
        if r1["recall_layers"]["local"] != next(l["layer"] for l in plan["layers"]
                                                if l["kind"] == "local"):
            failures.append("rollout: recall_layers.local is not the first local layer")
        if not isinstance(r1.get("isa"), str) or not r1["isa"]:
            failures.append(f"rollout (CPU): isa {r1.get('isa')!r} beside the digest")
        if r1.get("saved", {}).get("file") != snap or r2.get("resumed", {}).get("file") != snap:
            failures.append("rollout: saved.file / resumed.file do not name the snapshot")
        if ins[0].get("last_committed") != r1["last_frame"]:
            failures.append("inspect's last_committed is not the saving run's last_frame")
    if failures:
        for f in failures:
            print("FAIL:", f)
        raise SystemExit(1)
    print(f"PASS: {objects} JSON objects of plan, rollout and inspect match docs/json.md "
          f"({len(vocab)} words in the vocabulary)")


if __name__ == "__main__":
    main()
