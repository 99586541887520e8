"""Every way a ``cpu_manager_state`` file can fail to restore, as V2, V3 and V4 files, and what the real kubelets said.

``files()`` generates one file per (format, corruption): a bad default set, a bad entry set, a bad pod entry set, a
bad baseline, an unknown policy, a wrong or missing checksum, a missing or extra field, a field of the wrong JSON
type, broken JSON. A semantic corruption (a set, a name, a missing field) is written with the checksums a writer would
have computed for it, so what fails is the corruption and not the checksum; a corrupted JSON type keeps the
checksums of the file it was made from.

``restore_refusals_kubelet.json`` holds the real kubelets' answers for these files: restore_refusals_oracle.go,
built against k8s.io/kubernetes v1.35.4, v1.36.3 and v1.37.2, calls the kubelet's own ``state.NewCheckpointState``
on each (restore_refusals_record.sh builds and runs it; run it again after changing the files here). The test reads
the answers; no Go runs in the test suite.

    python -m ansible_collections.kubecpu.cpu_manager.tests.unit.support.restore_refusals cases
    python -m ... record OUT GOVERSION (RELEASE MINOR GATES ANSWERS SRCDIR UTILSDIR)...      (restore_refusals_record.sh)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import checksum, go_json_string
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint_formats import (data_checksum,
                                                                                                     v3_checksum)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDED = os.path.join(HERE, "restore_refusals_kubelet.json")
ORACLE = os.path.join(HERE, "restore_refusals_oracle.go")
PATH = "{dir}/cpu_manager_state"  # the file as the oracle names it in the kubelet's wrapped refusal
POLICY = "static"  # the policy the oracle's kubelet is configured with

# The node the files describe: a pod with one exclusive container (and its pod-level set and baseline).
BASE: Dict[str, Any] = {"policyName": POLICY, "defaultCpuSet": "0-1,6-7", "entries": {"pod-a": {"app": "2-3"}},
                        "podEntries": {"pod-a": "2-3"}, "baselines": {"pod-a": {"app": "2-3"}}}
MISSING = object()  # a field left out of the file


def _obj(pairs: List[Tuple[str, str]]) -> str:
    return "{%s}" % ",".join("%s:%s" % (go_json_string(key), literal) for key, literal in pairs)


def _entries(entries: Dict[str, Dict[str, str]]) -> str:
    return _obj([(pod, _obj([(name, go_json_string(cpus)) for name, cpus in sorted(inner.items())]))
                 for pod, inner in sorted(entries.items())])


def _pods(pods: Dict[str, str]) -> str:
    return _obj([(pod, '{"cpuSet":%s}' % go_json_string(cpus)) for pod, cpus in sorted(pods.items())])


def _baselines(baselines: Dict[str, Dict[str, str]]) -> str:
    return _obj([(pod, _obj([(name, '{"baseline":%s}' % go_json_string(cpus)) for name, cpus in sorted(inner.items())]))
                 for pod, inner in sorted(baselines.items())])


def _value(values: Dict[str, Any], key: str, zero: Any) -> Any:
    value = values.get(key, MISSING)
    return zero if value is MISSING else value


def _pod_sets(pods: Dict[str, str]) -> Dict[str, CPUSet]:
    """The pod entries as the V3 checksum dumps them; a set that does not parse (the decoding fails first) is left
    out."""
    out = {}
    for pod, cpus in pods.items():
        try:
            out[pod] = CPUSet.parse(cpus)
        except ValueError:
            continue
    return out


class File:
    """One file as (key, JSON literal) pairs, in the order the kubelet writes them; ``data`` (V4) is a File too."""

    def __init__(self, fmt: str, values: Dict[str, Any]) -> None:
        self.fmt = fmt
        policy, default = _value(values, "policyName", ""), _value(values, "defaultCpuSet", "")
        entries, pods = _value(values, "entries", {}), _value(values, "podEntries", {})
        pairs: List[Tuple[str, str]] = []
        for key, literal in (("policyName", go_json_string(policy)), ("defaultCpuSet", go_json_string(default))):
            if values.get(key, MISSING) is not MISSING:
                pairs.append((key, literal))
        if entries:
            pairs.append(("entries", _entries(entries)))
        if fmt == "v3" and pods:
            pairs.append(("podEntries", _pods(pods)))
        if fmt == "v3":
            pairs.append(("checksum", str(v3_checksum(policy, default, entries, _pod_sets(pods)))))
        else:
            pairs.append(("checksum", str(checksum(policy, default, entries))))
        self.data: Optional[List[Tuple[str, str]]] = None
        self.dropped: Tuple[str, ...] = ()  # V4's data or dataChecksum left out
        self.overrides: Dict[str, str] = {}  # V4's data or dataChecksum as these literals
        if fmt == "v4":
            data = [(key, literal) for key, literal in pairs if key != "checksum"]
            if pods:
                data.append(("podEntries", _pods(pods)))
            baselines = _value(values, "baselines", {})
            if baselines:
                data.append(("baselines", _baselines(baselines)))
            self.data = data
        self.pairs = pairs

    def set(self, key: str, literal: Optional[str], inner: bool = False) -> File:
        """``key`` given the raw JSON ``literal`` (in place, or added at the end), or dropped when it is None;
        ``inner``: in ``data``, its dataChecksum kept right."""
        pairs = self.data if inner else self.pairs
        assert pairs is not None
        at = [n for n, (name, _value) in enumerate(pairs) if name == key]
        if literal is None:
            pairs[:] = [pair for pair in pairs if pair[0] != key]
        elif at:
            pairs[at[0]] = (key, literal)
        else:
            pairs.append((key, literal))
        return self

    def text(self) -> str:
        pairs = list(self.pairs)
        if self.data is not None:
            data = _obj(self.data)
            tail = [("data", go_json_string(data)), ("dataChecksum", str(data_checksum(data)))]
            pairs += [(key, literal) for key, literal in tail if key not in self.dropped]
            pairs = [(key, self.overrides.get(key, literal)) for key, literal in pairs]
        return _obj(pairs)

    def outer(self, key: str, literal: Optional[str]) -> File:
        """V4's ``data`` or ``dataChecksum`` replaced by ``literal`` (or dropped), whatever ``data`` holds."""
        if literal is None:
            self.dropped = (*self.dropped, key)
        else:
            self.overrides = dict(self.overrides, **{key: literal})
        return self

    def stored(self, key: str) -> int:
        """The checksum the file holds (``checksum``, or ``dataChecksum`` of ``data`` as it stands)."""
        if key == "dataChecksum":
            assert self.data is not None
            return data_checksum(_obj(self.data))
        return int(dict(self.pairs)[key])


def _with(**changes: Any) -> Dict[str, Any]:
    values = json.loads(json.dumps(BASE))
    values.update(changes)
    return values


def _entry(cpus: str, pod: str = "pod-a", name: str = "app") -> Dict[str, Dict[str, str]]:
    return {pod: {name: cpus}}


Build = Callable[[str], Optional[File]]  # format -> the file, or None when the corruption has no such file

SEMANTIC: List[Tuple[str, Build]] = [
    ("restores", lambda fmt: File(fmt, _with())),
    ("default set unparsable", lambda fmt: File(fmt, _with(defaultCpuSet="1.3"))),
    ("default set out of int range", lambda fmt: File(fmt, _with(defaultCpuSet="0-99999999999999999999"))),
    ("default set reversed range", lambda fmt: File(fmt, _with(defaultCpuSet="7-6"))),
    ("default set with characters to escape", lambda fmt: File(fmt, _with(defaultCpuSet='0,"1"\n\u00a0\u00e9'))),
    ("entry set unparsable", lambda fmt: File(fmt, _with(entries=_entry("2.3")))),
    ("entry set reversed range", lambda fmt: File(fmt, _with(entries=_entry("3-2")))),
    ("entry names with characters to escape", lambda fmt: File(fmt, _with(entries=_entry("x", 'pod"\u0001', "a\tb")))),
    ("pod entry set unparsable", lambda fmt: File(fmt, _with(podEntries={"pod-a": "2.5"})) if fmt != "v2" else None),
    ("baseline unparsable", lambda fmt: File(fmt, _with(baselines={"pod-a": {"app": "x"}})) if fmt == "v4" else None),
    ("policy unknown", lambda fmt: File(fmt, _with(policyName="dynamic"))),
    ("policy none", lambda fmt: File(fmt, _with(policyName="none"))),
    ("policy with characters to escape", lambda fmt: File(fmt, _with(policyName='st"atic\u2028'))),
    ("missing policyName", lambda fmt: File(fmt, _with(policyName=MISSING))),
    ("missing defaultCpuSet", lambda fmt: File(fmt, _with(defaultCpuSet=MISSING))),
    ("missing entries", lambda fmt: File(fmt, _with(entries={}, baselines={}))),
    ("missing podEntries", lambda fmt: File(fmt, _with(podEntries={})) if fmt != "v2" else None),
    ("missing baselines", lambda fmt: File(fmt, _with(baselines={})) if fmt == "v4" else None),
]


def _checksums(fmt: str) -> List[Tuple[str, Build]]:
    rows: List[Tuple[str, Build]] = [
        ("checksum wrong", lambda f: File(f, _with()).set("checksum", str(File(f, _with()).stored("checksum") + 1))),
        ("checksum zero", lambda f: File(f, _with()).set("checksum", "0")),
        ("missing checksum", lambda f: File(f, _with()).set("checksum", None)),
    ]
    if fmt == "v4":
        rows += [
            ("dataChecksum wrong", lambda f: File(f, _with()).outer("dataChecksum", str(
                File(f, _with()).stored("dataChecksum") + 1))),
            ("dataChecksum zero", lambda f: File(f, _with()).outer("dataChecksum", "0")),
            ("missing dataChecksum", lambda f: File(f, _with()).outer("dataChecksum", None)),
            ("missing data", lambda f: File(f, _with()).outer("data", None)),
            ("data empty", lambda f: File(f, _with()).outer("data", '""')),
            ("missing data and dataChecksum", lambda f: File(f, _with()).outer("data", None).outer("dataChecksum",
                                                                                                   None)),
            ("data and dataChecksum only", lambda f: _only_data(File(f, _with()))),
            ("legacy part of another node", lambda f: _legacy(File(f, _with()), File("v2", _with(
                policyName="dynamic", defaultCpuSet="1.3")))),
        ]
    return rows


def _legacy(file: File, legacy: File) -> File:
    """A V4 file whose inline V2 part (with its own right checksum) is ``legacy``'s."""
    file.pairs = legacy.pairs
    return file


def _only_data(file: File) -> File:
    file.pairs = []
    return file


WRONG_TYPES = [  # (key, JSON literal of the wrong type), top level
    ("policyName", "5"), ("defaultCpuSet", "true"), ("entries", '"x"'), ("entries", "[]"),
    ("entries", '{"pod-a":"x"}'), ("entries", '{"pod-a":{"app":4}}'), ("checksum", '"x"'), ("checksum", "-1"),
    ("checksum", "1.5"), ("checksum", "18446744073709551616"),
]
WRONG_TYPES_V3 = [("podEntries", '"x"'), ("podEntries", '{"pod-a":5}'), ("podEntries", '{"pod-a":{"cpuSet":7}}')]
WRONG_TYPES_V4 = [("data", "5"), ("data", '"not json"'), ("data", '"[]"'), ("dataChecksum", '"x"'),
                  ("dataChecksum", "-1")]
WRONG_TYPES_DATA = [("policyName", "5"), ("defaultCpuSet", "[]"), ("entries", '"x"'), ("entries", '{"pod-a":{"app":4}}'),
                    ("podEntries", '"x"'), ("podEntries", '{"pod-a":5}'), ("podEntries", '{"pod-a":{"cpuSet":7}}'),
                    ("podEntries", '{"pod-a":null}'), ("baselines", '"x"'),
                    ("baselines", '{"pod-a":{"app":"2"}}'), ("baselines", '{"pod-a":{"app":{"baseline":2}}}')]


def _wrong_types(fmt: str) -> List[Tuple[str, Build]]:
    rows: List[Tuple[str, Build]] = []
    top = WRONG_TYPES + (WRONG_TYPES_V3 if fmt != "v2" else []) + (WRONG_TYPES_V4 if fmt == "v4" else [])
    for key, literal in top:
        if key in ("data", "dataChecksum"):
            rows.append(("%s is %s" % (key, literal), lambda f, k=key, v=literal: File(f, _with()).outer(k, v)))
        else:  # V4 has no outer podEntries: there it is an unknown key
            rows.append(("%s is %s" % (key, literal), lambda f, k=key, v=literal: File(f, _with()).set(k, v)))
    if fmt == "v4":
        for key, literal in WRONG_TYPES_DATA:
            rows.append(("data.%s is %s" % (key, literal),
                         lambda f, k=key, v=literal: File(f, _with()).set(k, v, inner=True)))
    return rows


def _extras(fmt: str) -> List[Tuple[str, Build]]:
    rows: List[Tuple[str, Build]] = [
        ("extra field", lambda f: File(f, _with()).set("extra", '{"x":[1,2]}')),
        ("extra field named like a field", lambda f: File(f, _with()).set("PolicyNAME", '"static"')),
        ("podEntries in a V2 file", lambda f: File(f, _with()).set("podEntries", '{"pod-b":{"cpuSet":"4"}}')),
    ]
    if fmt == "v4":
        rows.append(("extra field in data", lambda f: File(f, _with()).set("extra", "1", inner=True)))
    return rows if fmt != "v3" else [row for row in rows if row[0] != "podEntries in a V2 file"]


def _broken(fmt: str) -> List[Tuple[str, Callable[[str], str]]]:
    return [("truncated", lambda text: text[:-1]), ("trailing garbage", lambda text: text + "x"),
            ("a JSON array", lambda text: "[%s]" % text)]


FORMATS = ("v2", "v3", "v4")
WHOLE = [  # content of no format: Go's syntax check (encoding/json scanner.go), one row per state it words
    ("empty file", ""), ("only spaces", " \t\r\n"), ("null", "null"), ("a number", "7"), ("an empty object", "{}"),
    ("not JSON", "cpu_manager_state"), ("a byte order mark", "\ufeff{}"), ("a letter beyond ASCII", "{}\u00e9"),
    ("a single quote", "{'policyName':1}"), ("a control character", "\u0001"), ("a key without a value", '{"a"}'),
    ("a key not quoted", "{a:1}"), ("two values without a comma", '{"a":1 "b":2}'), ("an array missing a comma", "[1 2]"),
    ("a control character in a string", '{"a":"\u0001"}'), ("a bad escape", '{"a":"\\q"}'),
    ("a bad unicode escape", '{"a":"\\u12g4"}'), ("a minus alone", "-a"), ("a decimal point alone", "1.e5"),
    ("an exponent without digits", "1e+x"), ("a leading zero", "01"), ("tru", "tru"), ("fals0", "fals0"),
    ("nul1", "nul1"), ("NaN", '{"checksum":NaN}'), ("minus Infinity", '{"checksum":-Infinity}'),
    ("an unterminated string", '{"policyName":"stat'), ("an unclosed object", '{"policyName":"static",'),
    ("a closing bracket for a brace", '{"a":1]'), ("nested ten thousand and one deep", "[" * 10001 + "]" * 10001),
]
V1_FILES = [  # the format of kubelets up to 1.17 (container ID -> set), with a container no kubelet here knows
    ("unknown container", {"cid-1": "2-3"}, None), ("checksum wrong", {"cid-1": "2-3"}, 1),
    ("no entries", {}, None),
]


def _v1(entries: Dict[str, str], off: Optional[int]) -> str:
    pairs = [("policyName", go_json_string(POLICY)), ("defaultCpuSet", go_json_string("0-1,6-7"))]
    if entries:
        pairs.append(("entries", _obj([(cid, go_json_string(cpus)) for cid, cpus in sorted(entries.items())])))
    stored = checksum(POLICY, "0-1,6-7", entries, "v1") + (off or 0)
    return _obj(pairs + [("checksum", str(stored))])


def files() -> Dict[str, str]:
    """Case name ("v4/default set unparsable") to the file's content; ``any/...`` for content with no format."""
    out: Dict[str, str] = {}
    for fmt in FORMATS:
        for name, build in SEMANTIC + _checksums(fmt) + _wrong_types(fmt) + _extras(fmt):
            file = build(fmt)
            if file is not None:
                out["%s/%s" % (fmt, name)] = file.text()
        for name, breaking in _broken(fmt):
            out["%s/%s" % (fmt, name)] = breaking(File(fmt, _with()).text())
    for name, entries, off in V1_FILES:
        out["v1/%s" % name] = _v1(entries, off)
    for name, content in WHOLE:
        out["any/%s" % name] = content
    return out


# --- the recorded answers --------------------------------------------------------------------------------------
def recorded() -> Dict[str, Any]:
    with open(RECORDED, encoding="utf-8") as handle:
        return json.load(handle)  # type: ignore[no-any-return]


def _sha256(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


# Go sources whose texts a refusal is made of, per release (below the module's directory) and in GOROOT.
KUBELET_SOURCES = ("pkg/kubelet/cm/cpumanager/state/state_checkpoint.go", "pkg/kubelet/cm/cpumanager/state/checkpoint.go",
                   "pkg/kubelet/cm/cpumanager/state/state.go", "pkg/kubelet/checkpointmanager/errors/errors.go")
GOROOT_SOURCES = ("src/encoding/json/decode.go", "src/encoding/json/scanner.go", "src/strconv/number.go")
_CALL = re.compile(r'(?:fmt\.Errorf|errors\.New)\(\s*"((?:[^"\\]|\\.)*)"|return\s+"((?:[^"\\]|\\.)*)"\s*$')
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_VERB = re.compile(r"%[-+# 0-9.]*[a-zA-Z]")
_CONCATENATED = ("json: ", "invalid character ", "strconv.")  # Go texts built with + (encoding/json, strconv)


def sources(files_at: List[Tuple[str, str]]) -> List[Tuple[List[str], str]]:
    """The literal parts of each Go error text (a format split at its verbs, or the literals of a concatenation), with
    its "file:line", from each (shown name, path)."""
    out = []
    for shown, path in files_at:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                call = _CALL.search(line)
                if call:
                    text = next(group for group in call.groups() if group is not None)
                    parts = _VERB.split(json.loads('"%s"' % text))
                else:
                    literals = [json.loads('"%s"' % text) for text in _STRING.findall(line)]
                    if not literals or not literals[0].startswith(_CONCATENATED):
                        continue
                    parts = literals
                parts = [part for part in parts if part]
                if parts and len(parts[0].strip()) >= 8:
                    out.append((parts, "%s:%d" % (shown, number)))
    return out


def where(text: str, known: List[Tuple[List[str], str]]) -> List[str]:
    """The source lines whose texts make up ``text``: every literal part found in order; outermost first."""
    found = set()
    for parts, at in known:
        start = text.find(parts[0])
        while start >= 0:
            position = start + len(parts[0])
            for part in parts[1:]:
                position = text.find(part, position)
                if position < 0:
                    break
                position += len(part)
            else:
                found.add((start, -sum(map(len, parts)), at))
                break
            start = text.find(parts[0], start + 1)
    return [at for _first, _second, at in sorted(found)]


def record(out: str, go_version: str, runs: List[str]) -> None:
    """Write the recording from the oracle's answers: runs are (release, minor, gates, answers file, the release's
    module directory, its k8s.io/utils module directory)."""
    cases = files()
    goroot = os.environ.get("GOROOT_FOR_SOURCES", "")
    kubelets: List[Dict[str, Any]] = []
    made_of: Dict[str, Dict[str, List[str]]] = {}
    for n in range(0, len(runs), 6):
        release, minor, gates, answers, srcdir, utils = runs[n:n + 6]
        with open(answers, encoding="utf-8") as handle:
            said = json.load(handle)
        if sorted(said) != sorted(cases):
            raise SystemExit("%s: answers for other cases than the generated ones" % answers)
        known = sources([("k8s.io/kubernetes@%s/%s" % (release, rel), os.path.join(srcdir, rel))
                         for rel in KUBELET_SOURCES]
                        + [("%s/cpuset/cpuset.go" % os.path.basename(utils), os.path.join(utils, "cpuset/cpuset.go"))]
                        + [("GOROOT/%s" % rel, os.path.join(goroot, rel)) for rel in GOROOT_SOURCES])
        for text in said.values():
            if text:
                made_of.setdefault(release, {})[text] = where(text, known)
        gate_map = {} if gates == "-" else {k: v == "true" for k, v in (p.split("=") for p in gates.split(","))}
        kubelets.append({"version": minor, "release": release, "gates": gate_map,
                         "said": {name: said[name] for name in sorted(cases)}})
    for run in list(kubelets):  # 1.38: the same state and checkpointmanager packages (v1.38.0-beta.0), see the note
        if run["version"] == "1.37":
            kubelets.append({"version": "1.38", "release": run["release"], "gates": run["gates"], "said_as": "1.37"})
    doc = {
        "note": ("What the real kubelets said for each file of restore_refusals.py: restore_refusals_oracle.go, built "
                 "against k8s.io/kubernetes at each release with %s, calls the kubelet's state.NewCheckpointState on "
                 "the file (policy static); {dir} is the file's directory. 1.38 says what 1.37 (v1.37.2) says "
                 "(said_as): v1.38.0-beta.0 needs Go 1.27 to build, and its pkg/kubelet/cm/cpumanager/state and "
                 "pkg/kubelet/checkpointmanager are byte for byte v1.37.2's. 'from' gives, per release and text, the "
                 "Go source lines the text is made of, outermost first. Regenerate: "
                 "tests/unit/support/restore_refusals_record.sh (from the repository root; Go and the Go module "
                 "proxy)." % go_version),
        "oracle_sha256": _sha256(ORACLE),
        "files": cases,
        "kubelets": kubelets,
        "from": made_of,
    }
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=1, ensure_ascii=False)
        handle.write("\n")


def main(argv: List[str]) -> int:
    if argv[:1] == ["cases"]:
        json.dump({"cases": [{"name": name, "content": content} for name, content in files().items()]}, sys.stdout)
        return 0
    if argv[:1] == ["record"] and len(argv) >= 3 and (len(argv) - 3) % 6 == 0:
        record(argv[1], argv[2], argv[3:])
        return 0
    sys.stderr.write(__doc__ or "")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
