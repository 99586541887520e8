"""The kubelet checkpoint format: every checkpoint case of kubelet-cases/, checksum and byte-exact writing."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet import checkpoint
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import (RestoreFailure, decode,
                                                                                             encode)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.kubelet_cases import load
from hypothesis import given
from hypothesis import strategies as st

DATA = load("checkpoint_cases.json")
FILES = [c for c in DATA["cases"] if c["raw_json"]]
CLASSIC = [c for c in FILES if c["era"] == "classic"]
DEV = [c for c in FILES if c["era"] != "classic"]


def _restore(case):
    containers = {c["container_id"]: (c["pod"], c["container"]) for c in case["initial_containers"]}
    restored = decode(case["raw_json"].encode("utf-8"), case["policy_name"], containers)
    return restored.state


def _check(case, expected):
    if expected["accepted"]:
        state = _restore(case)
        assert str(state.default) == expected["default_cpuset"]
        assert state.to_dict()["entries"] == expected["entries"]
    else:
        with pytest.raises(RestoreFailure) as err:
            _restore(case)
        assert str(err.value) == expected["error"]


def test_inventory():
    assert len(CLASSIC) == 9 and len(DEV) == 17  # plus one "no file" case per era


@pytest.mark.parametrize("case", CLASSIC, ids=[c["id"] for c in CLASSIC])
def test_classic_cases(case):
    _check(case, case["expected"])


@pytest.mark.parametrize("case", DEV, ids=[c["id"] for c in DEV])
def test_pod_level_dev_samples_behave_as_a_classic_kubelet(case):
    _check(case, case["classic_kubelet_result_informational"])


@pytest.mark.parametrize("case", [c for c in FILES if c.get("checksum_expected_reproducible")
                                  and c["checksum_formula"] in ("v1", "v2")], ids=lambda c: c["id"])
def test_checksums_reproduce(case):
    import json
    doc = json.loads(case["raw_json"])
    entries = doc.get("entries", {})
    got = checkpoint.checksum(doc["policyName"], doc.get("defaultCPUSet", doc.get("defaultCpuSet", "")), entries,
                              case["checksum_formula"])
    assert got == case["checksum_analysis"]["stored"]


def test_real_world_files():
    written, old, edited = DATA["extra_samples"]
    state = decode(written["raw_json"].encode(), "static").state
    assert encode(state) == written["raw_json"].encode()  # byte for byte what the kubelet wrote
    assert decode(old["raw_json"].encode(), "none").version == "v1"
    with pytest.raises(RestoreFailure, match="checkpoint is corrupted"):
        decode(edited["raw_json"].encode(), "static")


def test_fresh_file_is_what_the_kubelet_writes():
    assert checkpoint.empty_file("none") == b'{"policyName":"none","defaultCpuSet":"","checksum":1353318690}'
    assert checkpoint.checksum("none", "4-6", {}) == 354655845
    assert checkpoint.checksum("none", "1-3", {}, "v1") == 1694838852


def test_go_escaping_and_key_order():
    """HTML-safe escaping as Go's json.Marshal does it; map keys in byte order ('<' sorts before 'a')."""
    state = CPUState("static", CPUSet.parse("0-1"), {"<pod&>": {'c"1': CPUSet.parse("2")}, "a": {"z": CPUSet([3])}})
    data = encode(state)
    assert data.rsplit(b',"checksum":', 1)[0] == (
        b'{"policyName":"static","defaultCpuSet":"0-1",'
        b'"entries":{"\\u003cpod\\u0026\\u003e":{"c\\"1":"2"},"a":{"z":"3"}}')
    assert decode(data, "static").state == state


@pytest.mark.parametrize("raw,reason", [
    (b"", "unexpected end of JSON input"),
    (b'{"policyName": "static"', "unexpected end of JSON input"),
    # 1.35's V2 struct is CPUManagerCheckpoint (CPUManagerCheckpointV2 is an alias of it): Go names the type
    (b"[]", "json: cannot unmarshal array into Go value of type state.CPUManagerCheckpoint"),
    (b'{"policyName":"static","defaultCpuSet":"","checksum":"1"}',
     "json: cannot unmarshal string into Go struct field CPUManagerCheckpoint.checksum of type checksum.Checksum"),
    (b'{"policyName":"static","defaultCpuSet":"","checksum":1.5}', "checksum.Checksum"),
    (b'{"policyName":"static","defaultCpuSet":"","checksum":-1}', "checksum.Checksum"),
    (b'{"policyName":"static","defaultCpuSet":"","entries":[],"checksum":0}', "cannot unmarshal array"),
    (b'{"policyName":NaN}', "invalid character 'N'"),
    (b'{"policyName":"static","defaultCpuSet":"0-3","checksum":12345}', "checksum is corrupted"),
])
def test_bad_files(raw, reason):
    with pytest.raises(RestoreFailure) as err:
        decode(raw, "static")
    assert reason.replace("checksum is corrupted", "checkpoint is corrupted") in str(err.value)


def test_go_key_matching_and_zero_checksum():
    state = decode(b'{"POLICYNAME":"static","DefaultCpuset":"0-3","Entries":{"p":{"c":"1"}},"checksum":0,'
                   b'"unknown":1}', "static").state
    assert str(state.default) == "0-3" and str(state.get("p", "c")) == "1"


names = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FFF, blacklist_categories=("Cs",)),
                min_size=1, max_size=12)
sets = st.frozensets(st.integers(0, 300), max_size=20).map(CPUSet)


@given(st.sampled_from(["static", "none"]), sets, st.dictionaries(names, st.dictionaries(names, sets, max_size=3),
                                                                  max_size=4))
def test_encode_decode_round_trip(policy, default, entries):
    entries = {pod: containers for pod, containers in entries.items() if containers}
    state = CPUState(policy, default, entries)
    restored = decode(encode(state), policy)
    assert restored.state == state and restored.version == "v2"


# --- the fast paths against their definitions --------------------------------------------------------
def _reference_fnv(data):
    value = checkpoint.FNV32_OFFSET
    for byte in data:
        value = ((value ^ byte) * checkpoint.FNV32_PRIME) % 2 ** 32
    return value


@given(st.binary(max_size=70))
def test_fnv_eight_bytes_a_step_is_fnv1a(data):
    assert checkpoint.fnv1a32(data) == _reference_fnv(data)


def _go_order(mapping):
    return sorted(mapping.items(), key=lambda item: item[0].encode("utf-8", "surrogatepass"))


def _reference_encode(state):
    """Go's json.Marshal string by string, keys in UTF-8 byte order, and the spew text hashed byte by byte."""
    entries = {pod: {name: str(cpus) for name, cpus in containers.items()} for pod, containers in state.entries.items()}
    fields = [("policyName", checkpoint.go_json_string(state.policy_name)),
              ("defaultCpuSet", checkpoint.go_json_string(str(state.default)))]
    if entries:
        fields.append(("entries", "{%s}" % ",".join(
            "%s:{%s}" % (checkpoint.go_json_string(pod), ",".join(
                "%s:%s" % (checkpoint.go_json_string(name), checkpoint.go_json_string(cpus))
                for name, cpus in _go_order(containers)))
            for pod, containers in _go_order(entries))))
    spew = "map[%s]" % " ".join("%s:map[%s]" % (pod, " ".join("%s:%s" % kv for kv in _go_order(containers)))
                                for pod, containers in _go_order(entries))
    text = ("(*state.CPUManagerCheckpoint){PolicyName:(string)%s DefaultCPUSet:(string)%s Entries:"
            "(map[string]map[string]string)%s Checksum:(checksum.Checksum)0}" % (state.policy_name, state.default, spew))
    fields.append(("checksum", str(_reference_fnv(text.encode("utf-8", "surrogatepass")))))
    return ("{%s}" % ",".join('"%s":%s' % field for field in fields)).encode("utf-8", "surrogatepass")


awkward = st.text(alphabet=st.one_of(st.sampled_from('"\\<>&\n\t\x00\x7f\u2028\u2029\ud800\udfff\u00e9\U0001f600 '),
                                     st.characters(min_codepoint=32, max_codepoint=126)), min_size=1, max_size=8)


@given(st.sampled_from(["static", "none"]), sets,
       st.dictionaries(st.one_of(awkward, names), st.dictionaries(st.one_of(awkward, names), sets, max_size=3),
                       max_size=5))
def test_encode_matches_the_reference_encoder(policy, default, entries):
    state = CPUState(policy, default, entries)
    data = encode(state)
    assert data == _reference_encode(state)
    if entries and all(entries.values()) and not checkpoint._SURROGATE.search("".join(list(entries) + [n for c in entries.values() for n in c])):
        assert decode(data, policy).state == state  # Go reads lone surrogates back as U+FFFD
