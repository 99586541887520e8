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
    decoder = hpack.Decoder()
    assert decoder.decode(hpack.encode(headers)) == headers
    assert decoder.table == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_the_protocol_error_only(data):
    try:
        hpack.Decoder().decode(data)
    except ProtocolError:
        pass
