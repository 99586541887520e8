"""Go's encoding/json as the kubelet's checkpoint structs meet it: Go's syntax refusals, keys matched exactly or by
Unicode simple folding, the last of a repeated key, null keeping a value, a wrong JSON type saved as the first error
while the rest decodes, an unsigned checksum that takes only integers without a sign within 64 bits, U+FFFD for lone
surrogates, and a PodEntry whose own error ends the decoding. (The whole-file cases, against the kubelet's own code,
are in test_checkpoint_formats.)"""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import RestoreFailure
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils import errors
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet import go_json
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.go_json import (
    CHECKSUM, ENTRIES, POD_ENTRIES, STRING, Struct, TypeMismatch, fix_surrogates, fold, parse)

CHECKPOINT = Struct("CPUManagerCheckpointV2", {"policyName": STRING, "defaultCpuSet": STRING, "entries": ENTRIES,
                                               "checksum": CHECKSUM})


@pytest.mark.parametrize("text, error", [  # Go's checkValid (encoding/json scanner.go), word for word
    ("", "unexpected end of JSON input"),
    ('{"a": 1', "unexpected end of JSON input"),
    ("NaN", "invalid character 'N' looking for beginning of value"),
    ('{"a": Infinity}', "invalid character 'I' looking for beginning of value"),
    ("{'a': 1}", "invalid character '\\'' looking for beginning of object key string"),
    ('{"a": -Infinity}', "invalid character 'I' in numeric literal"),
    ('{"a": 1}}', "invalid character '}' after top-level value"),
    ("\ufeff{}", "invalid character '\u00ef' looking for beginning of value"),  # the BOM's first byte, as a rune
    (b'{"a": 1}\xff', "invalid character '\u00ff' after top-level value"),  # U+00FF is printable
    (b'{"a": 1}\x80', "invalid character '\\u0080' after top-level value"),  # U+0080 is a control character
    ("[" * 10001, "invalid character '[' exceeded max depth"),
])
def test_what_gos_syntax_check_refuses(text, error):
    with pytest.raises(RestoreFailure) as raised:
        parse(text)
    assert str(raised.value) == error


@pytest.mark.parametrize("name, folded", [("policyName", "policyname"), ("\u017fum", "sum"), ("\u212aey", "key")])
def test_keys_fold_as_unicode_simple_folding(name, folded):
    assert fold(name) == folded


def test_lone_surrogates_become_the_replacement_character():
    assert fix_surrogates("a\ud800b") == "a\ufffdb" and fix_surrogates("plain") == "plain"


@pytest.mark.parametrize("doc, values, error", [
    # keys by exact name, else folded; the last of a repeated key wins; unknown keys are ignored
    ('{"POLICYNAME": "none", "policyName": "static", "other": 1}', {"policyName": "static"}, None),
    ('{"defaultCpuSet": "0-1", "defaultCpuSet": null}', {"defaultCpuSet": "0-1"}, None),  # null keeps it
    ('{"entries": {"a": {"c": "1"}}, "Entries": {"b": {"c": "2"}}}', {"entries": {"a": {"c": "1"}, "b": {"c": "2"}}},
     None),  # a map gains keys
    ('{"entries": null}', {"entries": None}, None),  # null makes a map nil
    ('{"policyName": {}, "defaultCpuSet": "3"}', {"defaultCpuSet": "3"},
     "cannot unmarshal object into Go struct field CPUManagerCheckpointV2.policyName of type string"),
    ('{"defaultCpuSet": []}', {}, "cannot unmarshal array into Go struct field CPUManagerCheckpointV2.defaultCpuSet"),
    ('{"checksum": 18446744073709551615}', {"checksum": 18446744073709551615}, None),
    ('{"checksum": 18446744073709551616}', {}, "cannot unmarshal number 18446744073709551616 into Go struct field "
                                               "CPUManagerCheckpointV2.checksum of type checksum.Checksum"),
    ('{"checksum": -0}', {}, "cannot unmarshal number -0 into"),
    ('{"checksum": 1.0}', {}, "cannot unmarshal number 1.0 into"),
    ('{"checksum": true}', {}, "cannot unmarshal bool into"),
    ('{"entries": {"a": {"c": 1, "d": "2"}}}', {},
     "cannot unmarshal number into Go struct field CPUManagerCheckpointV2.entries of type string"),
])
def test_a_struct_decodes_as_json_unmarshal_does(doc, values, error):
    decoded = CHECKPOINT.decode(parse(doc))
    for field, value in values.items():
        assert decoded.values[field] == value
    assert (decoded.error is None) if error is None else error in str(decoded.error)


def test_a_document_that_is_not_an_object_is_named_by_its_go_type():
    assert "cannot unmarshal array into Go value of type state.CPUManagerCheckpointV2" in str(
        CHECKPOINT.decode(parse("[]")).error)


def test_a_pod_entry_parses_its_cpu_set_and_its_error_ends_the_decoding():
    pods = Struct("CPUManagerCheckpointV4", {"podEntries": POD_ENTRIES})
    assert pods.decode(parse('{"podEntries": {"p": {"cpuSet": "1-2"}}}')).values["podEntries"] == {
        "p": CPUSet.parse("1-2")}
    failed = pods.decode(parse('{"podEntries": {"p": {"cpuSet": "x"}}}'))
    assert isinstance(failed.error, TypeMismatch) and str(failed.error) == (
        'failed to parse cpuset: strconv.Atoi: parsing "x": invalid syntax')


def test_the_type_error_is_a_domain_error_still_named_by_go_json():
    assert go_json.TypeMismatch is errors.TypeMismatch
    inner = TypeMismatch("number", "podEntryJSON", "cpuSet", "string")  # what PodEntry.UnmarshalJSON's decoder says
    assert str(inner.within("CPUManagerCheckpointData", "podEntries")) == (
        "json: cannot unmarshal number into Go struct field CPUManagerCheckpointData.podEntries.cpuSet of type string")
    bare = TypeMismatch("number", go_type="state.podEntryJSON")
    assert str(bare) == "json: cannot unmarshal number into Go value of type state.podEntryJSON"
    assert str(bare.within("CPUManagerCheckpointData", "podEntries")) == (
        "json: cannot unmarshal number into Go struct field CPUManagerCheckpointData.podEntries of type "
        "state.podEntryJSON")
    other = TypeMismatch('failed to parse cpuset: strconv.Atoi: parsing "x": invalid syntax')
    assert other.within("CPUManagerCheckpointData", "podEntries") is other  # not a type error: kept as it is


def test_a_field_of_an_embedded_struct_is_named_through_it():
    outer = Struct("CPUManagerCheckpoint", {"policyName": STRING, "data": STRING},
                   embedded={"policyName": "CPUManagerCheckpointV2"})
    assert str(outer.decode(parse('{"policyName": 5}')).error) == (
        "json: cannot unmarshal number into Go struct field CPUManagerCheckpoint.CPUManagerCheckpointV2.policyName of "
        "type string")
    assert str(outer.decode(parse('{"data": 5}')).error) == (
        "json: cannot unmarshal number into Go struct field CPUManagerCheckpoint.data of type string")
