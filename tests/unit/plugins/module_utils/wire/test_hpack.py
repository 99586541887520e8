"""HPACK as RFC 7541 defines it: the Huffman code of Appendix B, the request and response examples of Appendix C
(static and dynamic table, eviction, Huffman strings), the literal encoding a gRPC client sends, and refusals of
broken blocks."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ProtocolError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.wire import hpack
from hypothesis import given, settings
from hypothesis import strategies as st


def _code(symbol):
    for length, (first, symbols) in hpack._CODES.items():
        if symbol in symbols:
            return first + symbols.index(symbol), length
    raise AssertionError(symbol)


@pytest.mark.parametrize("symbol, code, length", [  # rows of RFC 7541 Appendix B
    (0, 0x1FF8, 13), (ord(" "), 0x14, 6), (ord("0"), 0x0, 5), (ord("a"), 0x3, 5), (ord("z"), 0x7B, 7),
    (ord("{"), 0x7FFE, 15), (127, 0xFFFFFFC, 28), (255, 0x3FFFFEE, 26), (hpack.EOS, 0x3FFFFFFF, 30),
])
def test_the_huffman_code_is_appendix_b(symbol, code, length):
    assert _code(symbol) == (code, length)


REQUESTS = [  # RFC 7541 C.4: three requests on one connection, Huffman-coded
    ("828684418cf1e3c2e5f23a6ba0ab90f4ff",
     [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")]),
    ("828684be5886a8eb10649cbf",
     [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com"),
      ("cache-control", "no-cache")]),
    ("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
     [(":method", "GET"), (":scheme", "https"), (":path", "/index.html"), (":authority", "www.example.com"),
      ("custom-key", "custom-value")]),
]
RESPONSES = [  # RFC 7541 C.6: three responses, a 256-byte table, so entries are evicted
    ("488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b97c8e9ae82ae43d3",
     [(":status", "302"), ("cache-control", "private"), ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
      ("location", "https://www.example.com")]),
    ("4883640effc1c0bf",
     [(":status", "307"), ("cache-control", "private"), ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
      ("location", "https://www.example.com")]),
    ("88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f"
     "3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
     [(":status", "200"), ("cache-control", "private"), ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
      ("location", "https://www.example.com"), ("content-encoding", "gzip"),
      ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1")]),
]


@pytest.mark.parametrize("blocks, table_size, sizes", [(REQUESTS, 4096, [57, 110, 164]), (RESPONSES, 256, [222, 222, 215])])
def test_appendix_c_blocks_decode_in_order_on_one_table(blocks, table_size, sizes):
    decoder = hpack.Decoder(table_size)
    for (block, headers), size in zip(blocks, sizes):
        assert decoder.decode(bytes.fromhex(block)) == headers
        assert decoder.size == size  # the table's size after each block, as the RFC lists it


def test_a_size_update_evicts_and_one_over_the_limit_is_refused():
    decoder = hpack.Decoder(4096)
    decoder.decode(bytes.fromhex(REQUESTS[0][0]))
    assert decoder.decode(bytes([0x20])) == [] and decoder.table == []  # size 0: everything evicted
    with pytest.raises(ProtocolError, match="over the limit"):
        decoder.decode(bytes([0x3F, 0xE2, 0x1F]))  # 4097


@pytest.mark.parametrize("block, error", [
    (bytes([0xFF, 0x00]), "index 127 outside the tables"),
    (bytes([0x00, 0x05, 0x61]), "truncated string"),
    (bytes([0x00]), "truncated string"),
    (bytes([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]), "truncated or oversized integer"),
    (bytes([0x00, 0x81, 0x00, 0x00]), "invalid Huffman padding"),  # a 0 bit of padding
    (bytes([0x00, 0x82, 0x1F, 0xFF, 0x00]), "invalid Huffman padding"),  # 8 bits of padding
    (bytes([0x00, 0x84, 0xFF, 0xFF, 0xFF, 0xFF, 0x00]), "EOS inside a Huffman string"),
])
def test_broken_blocks_are_refused(block, error):
    with pytest.raises(ProtocolError, match=error):
        hpack.Decoder().decode(block)


HEADER = st.tuples(st.text(min_size=1, max_size=40), st.text(max_size=300))


@settings(max_examples=200, deadline=None)
@given(st.lists(HEADER, max_size=12))
def test_what_the_client_encodes_every_decoder_reads_back_and_nothing_is_indexed(headers):
    decoder = hpack.Decoder(max_list=1 << 20)  # twelve long fields may pass the default list limit
    assert decoder.decode(hpack.encode(headers)) == headers
    assert decoder.table == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_the_protocol_error_only(data):
    try:
        hpack.Decoder().decode(data)
    except ProtocolError:
        pass


# --- a hostile encoder (issue 23) -------------------------------------------------------------------------------
def _literal_indexed(name, value):
    """Literal with incremental indexing, new name, no Huffman (RFC 7541 6.2.1), from octets."""
    return bytes([0x40, len(name)]) + name + bytes([len(value)]) + value


def test_octets_that_are_not_utf8_keep_the_dynamic_table_in_step():
    """An entry's size is its octets' (4.1): 3 + 3 + 32 = 38, so a table of 114 holds three such entries. Counted on
    the replaced text ("\ufffd" is 3 octets), the first would be 44 and the third insertion would evict it, after which
    the encoder's index 64 names an entry the decoder no longer has."""
    decoder = hpack.Decoder(4096)
    block = bytes([0x3F, 0x53])  # a size update to 114 (31 + 83)
    block += _literal_indexed(b"a\xff\xfe", b"v\x80z") + _literal_indexed(b"bbb", b"ccc") + _literal_indexed(b"ddd", b"eee")
    headers = decoder.decode(block)
    assert headers[0] == ("a\ufffd\ufffd", "v\ufffdz") and decoder.size == 114 and len(decoder.table) == 3
    assert decoder.decode(bytes([0x80 | 62, 0x80 | 63, 0x80 | 64])) == [
        ("ddd", "eee"), ("bbb", "ccc"), ("a\ufffd\ufffd", "v\ufffdz")]


def test_a_size_update_after_a_field_is_refused():
    """RFC 7541 4.2: a dynamic table size update only at the start of a header block (two are allowed there)."""
    assert hpack.Decoder().decode(bytes([0x20, 0x3F, 0xE1, 0x1F, 0x82])) == [(":method", "GET")]
    with pytest.raises(ProtocolError, match="size update after a header field"):
        hpack.Decoder().decode(bytes([0x82, 0x20]))


def test_a_header_list_over_the_limit_is_refused_as_it_is_decoded():
    field = hpack.encode([("x-fill", "v" * 1000)])  # 6 + 1000 + 32 = 1038 bytes of list each
    decoder = hpack.Decoder()
    assert len(decoder.decode(field * 15)) == 15  # 15,570 bytes: within 16 KiB
    with pytest.raises(ProtocolError, match="header list over 16384 bytes"):
        decoder.decode(field * 16)
    indexed = bytes([0x80 | 62])  # one indexed field repeated: tiny on the wire, large as a list
    decoder.decode(_literal_indexed(b"k", b"v" * 100))
    with pytest.raises(ProtocolError, match="header list over"):
        decoder.decode(indexed * 200)


# --- differential fuzzing against the hpack package: what it encodes, mutated, and random bytes (issue 23) ---------
hpack_package = pytest.importorskip("hpack")
OCTETS = st.binary(max_size=30)


def _theirs(decoder, block):
    try:
        return [(bytes(n).decode("utf-8", "replace"), bytes(v).decode("utf-8", "replace"))
                for n, v in decoder.decode(block, raw=True)], None
    except Exception as exc:  # any refusal of theirs
        return None, exc


def _ours(decoder, block):
    try:
        return decoder.decode(block), None
    except ProtocolError as exc:
        return None, exc


@settings(max_examples=150, deadline=None)
@given(blocks=st.lists(st.lists(st.tuples(st.binary(min_size=1, max_size=20), OCTETS), max_size=8), min_size=1,
                       max_size=5),
       sizes=st.lists(st.sampled_from([None, 0, 64, 256, 4096]), min_size=5, max_size=5), huffman=st.booleans(),
       data=st.data())
def test_blocks_the_hpack_package_encodes_read_the_same_through_a_shared_table(blocks, sizes, huffman, data):
    """Several blocks on one connection (indexing, eviction, size updates, Huffman or not, octets that are not
    UTF-8), then a mutation of the last: both decoders read the same fields or both refuse."""
    encoder, theirs, ours = hpack_package.Encoder(), hpack_package.Decoder(), hpack.Decoder()
    theirs.max_header_list_size = hpack.MAX_HEADER_LIST
    for fields, size in zip(blocks, sizes):
        if size is not None:
            encoder.header_table_size = size
        block = encoder.encode(fields, huffman=huffman)
        mine, my_error = _ours(ours, block)
        their, their_error = _theirs(theirs, block)
        assert my_error is None and their_error is None
        assert mine == their == [(n.decode("utf-8", "replace"), v.decode("utf-8", "replace")) for n, v in fields]
        assert [(bytes(n), bytes(v)) for n, v in theirs.header_table.dynamic_entries] == ours.table  # octet for octet
    mutated = bytearray(block or b"\x80")
    at = data.draw(st.integers(0, len(mutated) - 1))
    mutated[at] ^= 1 << data.draw(st.integers(0, 7))
    mine, my_error = _ours(ours, bytes(mutated))
    their, their_error = _theirs(theirs, bytes(mutated))
    assert (my_error is None) == (their_error is None), (bytes(mutated).hex(), my_error, their_error)
    if mine is not None:
        assert mine == their


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=80))
def test_random_bytes_are_refused_by_both_or_read_the_same(data):
    theirs = hpack_package.Decoder()
    theirs.max_header_list_size = hpack.MAX_HEADER_LIST
    mine, my_error = _ours(hpack.Decoder(), data)
    their, their_error = _theirs(theirs, data)
    assert (my_error is None) == (their_error is None), (data.hex(), my_error, their_error)
    assert mine == their
