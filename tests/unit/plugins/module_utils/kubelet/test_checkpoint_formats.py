"""The checkpoint per kubelet version (KUBELET_VERSIONS.md part A): every checksum vector there with its input, the
upstream test files read as each version reads them (fallbacks, acceptance, refusal texts), the bytes each version
writes, and over generated states: what version V writes, V and every later version read back as the kubelet
would, or refuse where it would."""

from __future__ import annotations

import hashlib
import json

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import CheckpointError, RestoreFailure
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import checksum
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint_formats import (data_checksum,
                                                                                                     read, v3_checksum,
                                                                                                     write)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.kubelet_versions import (POD_LEVEL,
                                                                                                   kubelet_version)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import cli_run, restore_refusals
from hypothesis import given, settings
from hypothesis import strategies as st

V135, V136, V136_ON, V137, V138 = (kubelet_version("1.35"), kubelet_version("1.36"),
                                   kubelet_version("1.36", {POD_LEVEL: True}), kubelet_version("1.37"),
                                   kubelet_version("1.38.1"))

# KUBELET_VERSIONS.md A.4: upstream test files, verbatim
V4_OK = ('{"policyName": "other", "defaultCPUSet": "1-9", "checksum": 1234, "data": "{\\"policyName\\":\\"static\\",'
         '\\"defaultCPUSet\\":\\"1-3\\",\\"entries\\":{\\"pod\\":{\\"container1\\":\\"4-6\\",\\"container2\\":\\"7-9\\"}},'
         '\\"podEntries\\":{\\"pod\\":{\\"cpuSet\\":\\"4-10\\"}},\\"baselines\\":{\\"pod\\":{\\"container1\\":'
         '{\\"baseline\\":\\"4-5\\"},\\"container2\\":{\\"baseline\\":\\"7-8\\"}}}}", "dataChecksum": 1032795074}')
V4_DATA_ONLY = ('{"data": "{\\"policyName\\":\\"static\\",\\"defaultCPUSet\\":\\"1-3\\",\\"entries\\":{\\"pod1\\":'
                '{\\"container\\":\\"4-5\\"},\\"pod2\\":{\\"container\\":\\"7-8\\"}},\\"podEntries\\":{\\"pod1\\":'
                '{\\"cpuSet\\":\\"4-6\\"},\\"pod2\\":{\\"cpuSet\\":\\"7-9\\"}}}", "dataChecksum": 2086345991}')
V3_FILE = ('{"policyName": "static", "defaultCPUSet": "1-2", "entries": {"pod1": {"container1": "5-6", '
           '"container2": "3-4"}}, "podEntries": {"pod2": {"cpuSet":"7-9"}}, "checksum": 766259872}')
V2_FILE = ('{"policyName": "none", "defaultCPUSet": "1-3", "entries": {"pod": {"container1": "4-6", '
           '"container2": "1-3"}}, "checksum": 3610638499}')
DERIVED_V4 = ('{"policyName":"static","defaultCpuSet":"0-1,4-7","entries":{"0b1c2d3e-pod-uid":{"app":"2-3"}},'
              '"checksum":1946183654,"data":"{\\"policyName\\":\\"static\\",\\"defaultCpuSet\\":\\"0-1,4-7\\",'
              '\\"entries\\":{\\"0b1c2d3e-pod-uid\\":{\\"app\\":\\"2-3\\"}}}","dataChecksum":4007015671}')


def test_every_checksum_vector_with_a_known_input():
    entries = {"pod1": {"container1": "5-6", "container2": "3-4"}}
    pods = {"pod2": CPUSet.parse("7-9")}
    assert v3_checksum("static", "1-2", entries, pods) == 766259872  # the 1.36 name ("legacy v3")
    assert v3_checksum("static", "1-2", entries, pods, "CPUManagerCheckpointV3") == 2284712151  # 1.37's
    assert data_checksum(json.loads(V4_OK)["data"]) == 1032795074
    assert data_checksum(json.loads(V4_DATA_ONLY)["data"]) == 2086345991
    assert checksum("none", "1-3", {"pod": {"container1": "4-6", "container2": "1-3"}}) == 3610638499
    assert checksum("none", "4-6", {}) == 354655845
    derived = {"0b1c2d3e-pod-uid": {"app": "2-3"}}
    assert checksum("static", "0-1,4-7", derived) == 1946183654
    assert data_checksum(json.loads(DERIVED_V4)["data"]) == 4007015671
    assert data_checksum('{"policyName":"static","defaultCpuSet":"0-1,4-7","entries":{"0b1c2d3e-pod-uid":'
                         '{"app":"2-3"}},"podEntries":{"0b1c2d3e-pod-uid":{"cpuSet":"2-3"}}}') == 572449375
    assert v3_checksum("static", "0-1,4-7", derived, {"0b1c2d3e-pod-uid": CPUSet.parse("2-3")}) == 3864719446


def _derived(pod_entry=False):
    state = CPUState("static", CPUSet.parse("0-1,4-7"), {"0b1c2d3e-pod-uid": {"app": CPUSet.parse("2-3")}})
    if pod_entry:
        state.pod_entries = {"0b1c2d3e-pod-uid": CPUSet.parse("2-3")}
    return state


def test_what_each_version_writes():
    assert write(_derived(), V137).decode() == DERIVED_V4 == write(_derived(), V138).decode()
    v2 = write(_derived(), V135)
    assert v2 == write(_derived(), V136) == DERIVED_V4.split(',"data"', maxsplit=1)[0].encode() + b"}"  # the V4's legacy part
    v3 = json.loads(write(_derived(True), V136_ON))
    assert v3["podEntries"] == {"0b1c2d3e-pod-uid": {"cpuSet": "2-3"}} and v3["checksum"] == 3864719446
    assert list(v3) == ["policyName", "defaultCpuSet", "entries", "podEntries", "checksum"]
    v4 = json.loads(write(_derived(True), V137))
    assert v4["checksum"] == 1946183654 and v4["dataChecksum"] == 572449375  # the legacy part is unchanged


@pytest.mark.parametrize("version", [V137, V138])
def test_1_37_reads_v4_with_pod_entries_and_baselines_and_ignores_the_legacy_part(version):
    state = read(V4_OK.encode(), "static", version).state
    assert state.to_dict() == {"policyName": "static", "defaultCpuSet": "1-3",
                               "entries": {"pod": {"container1": "4-6", "container2": "7-9"}},
                               "podEntries": {"pod": "4-10"},
                               "baselines": {"pod": {"container1": "4-5", "container2": "7-8"}}}
    only = read(V4_DATA_ONLY.encode(), "static", version).state
    assert only.pod_entries == {"pod1": CPUSet.parse("4-6"), "pod2": CPUSet.parse("7-9")}


@pytest.mark.parametrize("text, version, policy, want", [
    (V4_OK, V136, "static", "checkpoint is corrupted"),  # 1.36 verifies the (bogus) legacy part
    (V4_OK, V135, "static", "checkpoint is corrupted"),
    (V4_DATA_ONLY, V136, "static", 'configured policy "static" differs from state checkpoint policy ""'),
    (V3_FILE, V135, "static", "checkpoint is corrupted"),
    (V3_FILE, V136, "static", "json: cannot unmarshal object into Go struct field CPUManagerCheckpointV1.entries"),
    ('{"dataChecksum": 5}', V137, "static", "could not load v4 checkpoint: failed to deserialize cpu manager "
                                            "checkpoint data: unexpected end of JSON input"),
    ('{"data": "{}", "dataChecksum": 5}', V137, "static", "could not load v4 checkpoint: checkpoint is corrupted"),
    ('{"policyName":"none","defaultCpuSet":"1-3","entries":{"c1":"4-6"},"checksum":0}', V137, "none",
     "json: cannot unmarshal string into Go struct field CPUManagerCheckpointV2.entries"),  # V1: gone in 1.37
])
def test_refusals_as_each_version_words_them(text, version, policy, want):
    with pytest.raises(RestoreFailure) as raised:
        read(text.encode(), policy, version)
    assert str(raised.value).startswith(want)


@pytest.mark.parametrize("text, version, policy, entries, pods", [
    (V3_FILE, V136_ON, "static", {"pod1": {"container1": "5-6", "container2": "3-4"}}, {"pod2": "7-9"}),
    (V3_FILE, V137, "static", {"pod1": {"container1": "5-6", "container2": "3-4"}}, {"pod2": "7-9"}),
    (V2_FILE, V137, "none", {"pod": {"container1": "4-6", "container2": "1-3"}}, None),
    (V2_FILE, V136_ON, "none", {"pod": {"container1": "4-6", "container2": "1-3"}}, None),
    (DERIVED_V4, V136, "static", {"0b1c2d3e-pod-uid": {"app": "2-3"}}, None),  # the inline V2 part
    (DERIVED_V4, V135, "static", {"0b1c2d3e-pod-uid": {"app": "2-3"}}, None),
])
def test_fallbacks(text, version, policy, entries, pods):
    doc = read(text.encode(), policy, version).state.to_dict()
    assert doc["entries"] == entries and doc.get("podEntries") == pods


@st.composite
def states(draw):
    free = list(range(16))
    state = CPUState(draw(st.sampled_from(["static", "none"])))
    if state.policy_name == "static":
        for n in range(draw(st.integers(0, 4))):
            taken = draw(st.permutations(free))[:draw(st.integers(1, 3))]
            free = [c for c in free if c not in taken]
            state.set("pod-%d" % n, draw(st.sampled_from(["app", "c-1"])), CPUSet(taken))
            if draw(st.booleans()):
                state.pod_entries["pod-%d" % n] = CPUSet(taken)
            if draw(st.booleans()):
                state.baselines["pod-%d" % n] = {"app": str(CPUSet(taken))}
        state.default = CPUSet(free)
    return state


WRITERS = [V135, V136, V136_ON, V137, V138]


@settings(max_examples=400, deadline=None)
@given(states(), st.sampled_from(WRITERS))
def test_what_a_version_writes_every_later_reader_reads_as_the_kubelet_would(state, writer):
    data = write(state, writer)
    for reader in WRITERS:
        if reader.minor < writer.minor:
            continue
        kind = writer.writes
        if kind == "v3" and reader.minor == 36 and not reader.pod_level:
            with pytest.raises(RestoreFailure):  # 1.36 with the gate off refuses a V3 file (when it has content)
                read(data, state.policy_name, reader)
            continue
        back = read(data, state.policy_name, reader).state
        assert (back.policy_name, back.default, back.entries) == (state.policy_name, state.default, state.entries)
        kept = reader.minor >= 37 or (kind == "v3" and reader.pod_level)  # who sees podEntries
        assert back.pod_entries == (state.pod_entries if kept and kind != "v2" else {})
        assert back.baselines == (state.baselines if kind == "v4" else {})
    for older in (V135, V136):  # a V4 file stays readable by older kubelets through its legacy part
        if writer.writes == "v4":
            back = read(data, state.policy_name, older).state
            assert (back.default, back.entries, back.pod_entries) == (state.default, state.entries, {})


@pytest.mark.parametrize("data, want", [  # data strings of upstream tests whose checksum is the data's (A.2)
    ('{"policyName":"none","defaultCPUSet":"4-6"}', 657950972),
    ('{"policyName":"static","defaultCPUSet":"7-9","entries":{"pod":{"container1":"4-6","container2":"1-3"}}}',
     1420829534),
    ('{"policyName":"none","defaultCPUSet":"1.3"}', 3033143655),
    ('{"policyName":"static","defaultCPUSet":"1-3","entries":{"pod":{"container1":"4-6","container2":"asd"}}}',
     3794806925),
    ('{"policyName":"none","defaultCPUSet":"4-6","unknownField":"value"}', 3492408555),
])
def test_data_checksum_vectors(data, want):
    assert data_checksum(data) == want


@pytest.mark.parametrize("policy, default, version, want", [  # V2 and V1 vectors of the upstream tests
    ("other", "1-3", "v2", 1394507217), ("none", "1.3", "v2", 3021697696), ("none", "1-3", "v1", 1694838852),
])
def test_legacy_checksum_vectors(policy, default, version, want):
    assert checksum(policy, default, {}, version) == want


# --- every field as the kubelet's struct decodes it, with Go's types and ranges (issue 23) ------------------------
# The 16 files a 1.37 kubelet refused and kubecpu read: a V4 file whose inline V2 part had the wrong JSON type. Go's
# json.Unmarshal of the outer struct fails on them before `data` is looked at; with `data` present, 1.37 does not fall
# back, so the file is refused.
WRONG_TYPES = [
    ("policyName", "{}", "object", "string"),
    ("defaultCpuSet", "[]", "array", "string"),
    ("checksum", "[]", "array", "checksum.Checksum"),
    ("checksum", "1" * 100, "number " + "1" * 100, "checksum.Checksum"),  # overflows uint64
    ("checksum", "18446744073709551616", "number 18446744073709551616", "checksum.Checksum"),  # 2^64
    ("checksum", "-0", "number -0", "checksum.Checksum"),  # ParseUint takes no sign
    ("checksum", "1.0", "number 1.0", "checksum.Checksum"),
    ("checksum", '"1946183654"', "string", "checksum.Checksum"),
    ("checksum", "true", "bool", "checksum.Checksum"),
    ("policyName", "5", "number", "string"),
    ("entries", '"x"', "string", "map[string]map[string]string"),
    ("entries", '{"p": []}', "array", "map[string]string"),
    ("entries", '{"p": {"c": 4}}', "number", "string"),
    ("dataChecksum", '"x"', "string", "checksum.Checksum"),
]


def _with(text, field, literal):
    """``text`` (one JSON object) with ``field`` set to the raw JSON ``literal``, in place or added at the end."""
    doc = json.loads(text)
    doc[field] = "\0marker\0"
    return json.dumps(doc).replace('"\\u0000marker\\u0000"', literal)


@pytest.mark.parametrize("field, literal, shown, go_type", WRONG_TYPES, ids=[w[0] + ":" + w[1][:12] for w in WRONG_TYPES])
def test_a_v4_file_with_a_field_of_the_wrong_type_is_refused_as_1_37_refuses_it(field, literal, shown, go_type):
    text = _with(DERIVED_V4, field, literal)
    with pytest.raises(RestoreFailure) as raised:
        read(text.encode(), "static", V137)
    path = field if field == "dataChecksum" else "CPUManagerCheckpointV2." + field  # the embedded V2 struct's fields
    assert str(raised.value) == ("could not load v4 checkpoint: failed to deserialize cpu manager checkpoint: json: "
                                 "cannot unmarshal %s into Go struct field CPUManagerCheckpoint.%s of type %s" % (
                                     shown, path, go_type))
    if field != "dataChecksum":  # a V2 field: every earlier kubelet, reading V2, refuses the file too
        for version in (V135, V136, V136_ON):
            with pytest.raises(RestoreFailure, match="json: cannot unmarshal"):
                read(text.encode(), "static", version)


@pytest.mark.parametrize("field, literal, message", [
    ("podEntries", '"x"', "json: cannot unmarshal string into Go struct field CPUManagerCheckpointData.podEntries of "
                          "type state.PodCPUAssignments"),
    # PodEntry.UnmarshalJSON's errors: a type error named by the enclosing struct and field path (Go's
    # addErrorContext), the CPU set's as state.go words it
    ("podEntries", '{"p": 5}', "json: cannot unmarshal number into Go struct field CPUManagerCheckpointData.podEntries "
                               "of type state.podEntryJSON"),
    ("podEntries", '{"p": {"cpuSet": 7}}', "json: cannot unmarshal number into Go struct field "
                                           "CPUManagerCheckpointData.podEntries.cpuSet of type string"),
    ("podEntries", '{"p": {"cpuSet": "x"}}', 'failed to parse cpuset: strconv.Atoi: parsing "x": invalid syntax'),
    ("baselines", "[]", "json: cannot unmarshal array into Go struct field CPUManagerCheckpointData.baselines of type "
                        "map[string]map[string]state.ContainerCPUs"),
    ("baselines", '{"p": {"c": "2"}}', "json: cannot unmarshal string into Go struct field "
                                       "CPUManagerCheckpointData.baselines of type state.ContainerCPUs"),
    ("baselines", '{"p": {"c": {"baseline": 2}}}', "json: cannot unmarshal number into Go struct field "
                                                   "ContainerCPUs.baselines.baseline of type string"),
    ("policyName", "[]", "json: cannot unmarshal array into Go struct field CPUManagerCheckpointData.policyName of "
                         "type string"),
])
def test_the_data_object_decodes_with_the_same_rules(field, literal, message):
    data = _with('{"policyName":"static","defaultCpuSet":"0-1,4-7","entries":{"u":{"app":"2-3"}}}', field, literal)
    text = json.dumps({"data": data, "dataChecksum": data_checksum(data)})
    with pytest.raises(RestoreFailure) as raised:
        read(text.encode(), "static", V137)
    assert str(raised.value).startswith("could not load v4 checkpoint: failed to deserialize cpu manager checkpoint "
                                        "data: " + message)


@pytest.mark.parametrize("text, version, entries", [
    # null leaves a string as it was and makes a map nil; unknown keys are ignored; a repeated map key adds to it
    ('{"policyName":"static","policyName":null,"defaultCpuSet":"0-7","entries":null,"checksum":0}', V135, {}),
    ('{"policyName":"static","defaultCpuSet":"0-1,4-7","entries":{"u":{"app":"2-3"}},"entries":{"v":{"b":"8"}},'
     '"checksum":0,"podEntries":7,"extra":[1,{}]}', V135, {"u": {"app": "2-3"}, "v": {"b": "8"}}),
    # a V4 file without data whose dataChecksum has the wrong type: not "hard" (no data, dataChecksum 0), so 1.37
    # falls back to V3 (which refuses checksum 0) and V2, where dataChecksum is no field at all
    ('{"policyName":"static","defaultCpuSet":"0-7","checksum":0,"dataChecksum":"x"}', V137, {}),
])
def test_what_go_accepts_kubecpu_reads_the_same(text, version, entries):
    assert read(text.encode(), "static", version).state.to_dict()["entries"] == entries


def test_a_file_with_the_kelvin_sign_in_a_key_matches_as_go_folds_it():
    text = DERIVED_V4.replace('"dataChecksum"', '"dataChec\u212asum"')  # K (U+212A) folds to k in Go
    assert read(text.encode(), "static", V137).state.to_dict()["entries"] == {"0b1c2d3e-pod-uid": {"app": "2-3"}}


# --- every restore refusal in the real kubelets' words (issue 63, item 9) --------------------------------------------
# Each row: (kubelet version and gates, format, corruption) -> what that kubelet's state.NewCheckpointState said for
# the file, recorded by restore_refusals_oracle.go against k8s.io/kubernetes v1.35.4, v1.36.3 and v1.37.2 (1.38: as
# 1.37.2, whose state packages v1.38.0-beta.0 has unchanged); tests/unit/support/restore_refusals_kubelet.json, with
# the Go lines each text is made of. Where the texts come from (k8s.io/kubernetes@<release>/pkg/kubelet/cm/cpumanager/
# state/, lines of that release):
#   the wrapper "could not restore state from checkpoint: %v, please drain ...": state_checkpoint.go:64 (v1.35.4),
#     :68 (v1.36.3), :67 (v1.37.2)
#   'could not parse default cpu set %q: %v': state_checkpoint.go:124 (v1.35.4); '...: %w' :150 and :168 (v1.36.3)
#   'could not parse default CPU set %q: %w': state_checkpoint.go:138 (v1.37.2)
#   'could not parse cpuset %q for container %q in pod %q': :133 (v1.35.4), :153 and :171 (v1.36.3), :143 (v1.37.2)
#   'could not parse Baseline cpuset %q for container %q in pod %q: %w': state_checkpoint.go:156 (v1.37.2, with
#     InPlacePodVerticalScalingExclusiveCPUs)
#   'configured policy %q differs from state checkpoint policy %q': :119 (v1.35.4), :146 and :164 (v1.36.3), :135
#     (v1.37.2)
#   'could not load v4 checkpoint: %w': state_checkpoint.go:203 (v1.37.2); 'failed to deserialize cpu manager
#     checkpoint: %w' and '... checkpoint data: %w': checkpoint.go:198 and :201 (v1.37.2)
#   'failed to parse cpuset: %w' (a pod entry's set): state.go:100 (v1.36.3, v1.37.2)
#   "checkpoint is corrupted": pkg/kubelet/checkpointmanager/errors/errors.go:29
#   "json: cannot unmarshal ..." and the syntax errors: Go's encoding/json decode.go:137, :139, scanner.go:173, :595;
#   'strconv.Atoi: parsing %q: ...': Go's strconv/number.go:259; 'invalid range %q (%d > %d)': k8s.io/utils
#     cpuset/cpuset.go:235
RECORDED = restore_refusals.recorded()


def _runs():
    by_version = {(run["version"], tuple(sorted(run["gates"].items()))): run for run in RECORDED["kubelets"]}
    for run in RECORDED["kubelets"]:
        gates = tuple(sorted(run["gates"].items()))
        said = by_version[(run.get("said_as", run["version"]), gates)]["said"]
        yield run["version"], dict(gates), run["release"], said


REFUSALS = [pytest.param(version, gates, case, text, RECORDED["from"].get(release, {}).get(text, []),
                         id="%s%s:%s" % (version, "".join("+" + name for name, on in sorted(gates.items()) if on), case))
            for version, gates, release, said in _runs() for case, text in sorted(said.items())]


def _kubecpu_says(content, version, gates):
    """What kubecpu says for the file where the kubelet's NewCheckpointState speaks: "" when it restores."""
    try:
        read(content.encode("utf-8"), restore_refusals.POLICY, kubelet_version(version, gates))
    except RestoreFailure as exc:
        return str(CheckpointError(restore_refusals.PATH, str(exc)))
    return ""


def test_the_recorded_answers_are_for_these_files_and_this_program():
    assert RECORDED["files"] == restore_refusals.files()
    with open(restore_refusals.ORACLE, "rb") as handle:
        assert hashlib.sha256(handle.read()).hexdigest() == RECORDED["oracle_sha256"]
    versions = {run["version"] for run in RECORDED["kubelets"]}
    assert versions == {"1.35", "1.36", "1.37", "1.38"} and len(REFUSALS) == 7 * len(RECORDED["files"])
    formats = {case.split("/")[0] for case in RECORDED["files"]}
    assert formats == {"v1", "v2", "v3", "v4", "any"}


@pytest.mark.parametrize("version, gates, case, said, made_of", REFUSALS)
def test_every_restore_refusal_in_the_kubelets_words(version, gates, case, said, made_of):
    """The file of ``case`` restores in kubecpu exactly when it restores in the kubelet, and a refusal is the
    kubelet's text, word for word (``made_of``: the Go source lines of the text)."""
    assert _kubecpu_says(RECORDED["files"][case], version, gates) == said, made_of


def test_unparsable_default_cpu_set_in_the_kubelets_words(tmp_path):
    """Issue 63, item 9: 1.37 says "default CPU set" where 1.35 and 1.36 say "default cpu set"; bin/kubecpu state
    refuses the file with each kubelet's own text, and leaves it as it was."""
    for fmt in ("v2", "v3", "v4"):
        content = RECORDED["files"]["%s/default set unparsable" % fmt]
        path = tmp_path / ("%s.state" % fmt)
        path.write_text(content)
        for version, gates, _release, said in _runs():
            if gates:
                continue
            want = said["%s/default set unparsable" % fmt].replace(restore_refusals.PATH, str(path))
            flags = ["state", "--kubelet-version", version, "--state", str(path)]
            code, _out, err = cli_run.run(flags)
            assert (code, err.strip()) == (1, want)
            assert path.read_text() == content
    v137 = dict(next(run for run in RECORDED["kubelets"] if run["version"] == "1.37" and not run["gates"]))["said"]
    assert 'could not parse default CPU set "1.3": strconv.Atoi: parsing "1.3": invalid syntax' in v137[
        "v4/default set unparsable"]
