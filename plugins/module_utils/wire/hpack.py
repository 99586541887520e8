# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""HPACK (RFC 7541), as much as a gRPC client needs: header blocks encoded as plain literals (never indexed, no
Huffman: valid for every decoder), and the server's blocks decoded in full (static and dynamic table, size updates,
Huffman strings).

The decoder works on octets, as RFC 7541 does: the dynamic table keeps the octets it was given and counts an entry's
size on them (section 4.1), so a field that is not UTF-8 keeps the table in step with the encoder's; only the fields
handed out are text (UTF-8, a bad octet replaced). A decoded header list is at most ``MAX_HEADER_LIST`` (the size our
SETTINGS_MAX_HEADER_LIST_SIZE announces, counted as section 4.1 counts an entry).

The Huffman code of RFC 7541 Appendix B is canonical (within one length, codes ascend with the symbol), so the
lengths alone define it: ``_LENGTHS`` holds the code length of symbols 0..256 as letters, ``A`` meaning 5 bits.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from ..errors import ProtocolError

Header = Tuple[str, str]
Octets = Tuple[bytes, bytes]
MAX_HEADER_LIST = 16 << 10  # bytes of one decoded header list (gRPC's default limit is 16 KiB too)

# RFC 7541 Appendix A: the static table, indexes 1..61.
STATIC: Sequence[Header] = (
    (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"), (":path", "/index.html"),
    (":scheme", "http"), (":scheme", "https"), (":status", "200"), (":status", "204"), (":status", "206"),
    (":status", "304"), (":status", "400"), (":status", "404"), (":status", "500"), ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""), ("accept", ""),
    ("access-control-allow-origin", ""), ("age", ""), ("allow", ""), ("authorization", ""), ("cache-control", ""),
    ("content-disposition", ""), ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
    ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""), ("date", ""),
    ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""), ("if-match", ""),
    ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""), ("if-unmodified-since", ""),
    ("last-modified", ""), ("link", ""), ("location", ""), ("max-forwards", ""), ("proxy-authenticate", ""),
    ("proxy-authorization", ""), ("range", ""), ("referer", ""), ("refresh", ""), ("retry-after", ""),
    ("server", ""), ("set-cookie", ""), ("strict-transport-security", ""), ("transfer-encoding", ""),
    ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""))

_LENGTHS = (
    "ISXXXXXXXTZXXZXXXXXXXXZXXXXXXXXXBFFHIBDGFFDGDBBBAAABBBBBBBCDKBHFIBCCCCCCCCCCCCCCCCCCCCCCDCDIOIJBKABABABBBACCBBBA"
    "BCBAABCCCCCKGJIXPRPPRRRSRSSSSSTSTTRSTSSSSQRSRSSTRQPRRSSQSRRTQRSSQQRQSRSSPRRRSRRSVVPORSRUVVVWWVTUOQVWWVWTQQVVXWWW"
    "PTPQRQQSRRUUTTVSVWVVWWWWWXWWWWWVZ")
EOS = 256


def _canonical() -> Dict[int, Tuple[int, List[int]]]:
    """Per code length: the first code of that length and the symbols that have it, in order."""
    lengths = [ord(letter) - ord("A") + 5 for letter in _LENGTHS]
    table: Dict[int, Tuple[int, List[int]]] = {}
    code, previous = -1, min(lengths)
    for symbol in sorted(range(len(lengths)), key=lambda s: (lengths[s], s)):
        code = (code + 1) << (lengths[symbol] - previous)
        previous = lengths[symbol]
        table.setdefault(previous, (code, []))[1].append(symbol)
    return table


_CODES = _canonical()
_STATIC_OCTETS = tuple((name.encode(), value.encode()) for name, value in STATIC)


def huffman_decode(data: bytes) -> bytes:
    """A Huffman-coded string; the padding must be fewer than 8 one-bits (the EOS prefix), as RFC 7541 5.2 asks."""
    out = bytearray()
    code = length = 0
    for byte in data:
        for shift in range(7, -1, -1):
            code = (code << 1) | ((byte >> shift) & 1)
            length += 1
            first, symbols = _CODES.get(length, (0, ()))
            if symbols and 0 <= code - first < len(symbols):
                symbol = symbols[code - first]
                if symbol == EOS:
                    raise ProtocolError("HPACK: EOS inside a Huffman string")
                out.append(symbol)
                code = length = 0
            elif length > 30:
                raise ProtocolError("HPACK: invalid Huffman code")
    if length > 7 or code != (1 << length) - 1:
        raise ProtocolError("HPACK: invalid Huffman padding")
    return bytes(out)


def _integer(value: int, prefix: int, flags: int) -> bytes:
    limit = (1 << prefix) - 1
    if value < limit:
        return bytes([flags | value])
    out = bytearray([flags | limit])
    value -= limit
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode(headers: Sequence[Header]) -> bytes:
    """A header block of literals without indexing and with a literal name (RFC 7541 6.2.2), no Huffman."""
    out = bytearray()
    for name, value in headers:
        out.append(0)
        for text in (name.encode(), value.encode()):
            out += _integer(len(text), 7, 0)
            out += text
    return bytes(out)


class Decoder:
    """Decodes one connection's header blocks in order (the dynamic table lives across blocks)."""

    def __init__(self, max_size: int = 4096, max_list: int = MAX_HEADER_LIST) -> None:
        self.max_size = self.limit = max_size  # the limit our SETTINGS allow; the size the peer last chose
        self.max_list = max_list
        self.table: List[Octets] = []  # newest first, as the octets came
        self.size = 0

    def decode(self, block: bytes) -> List[Header]:
        headers: List[Header] = []
        at = listed = 0
        while at < len(block):
            first = block[at]
            if first & 0xE0 == 0x20:  # dynamic table size update
                if headers:  # RFC 7541 4.2: only at the start of a header block
                    raise ProtocolError("HPACK: a dynamic table size update after a header field")
                size, at = self._int(block, at, 5)
                if size > self.max_size:
                    raise ProtocolError("HPACK: table size %d over the limit %d" % (size, self.max_size))
                self.limit = size
                self._evict(0)
                continue
            if first & 0x80:  # indexed field
                index, at = self._int(block, at, 7)
                field = self._entry(index)
            elif first & 0xC0 == 0x40:  # literal with incremental indexing
                field, at = self._literal(block, at, 6)
                self._add(field)
            else:  # literal without indexing (0000) or never indexed (0001)
                field, at = self._literal(block, at, 4)
            listed += len(field[0]) + len(field[1]) + 32  # RFC 7541 4.1's size, as SETTINGS_MAX_HEADER_LIST_SIZE
            if listed > self.max_list:
                raise ProtocolError("HPACK: a header list over %d bytes" % self.max_list)
            headers.append((field[0].decode("utf-8", "replace"), field[1].decode("utf-8", "replace")))
        return headers

    def _int(self, block: bytes, at: int, prefix: int) -> Tuple[int, int]:
        limit = (1 << prefix) - 1
        value = block[at] & limit
        at += 1
        if value < limit:
            return value, at
        shift = 0
        while True:
            if at >= len(block) or shift > 28:
                raise ProtocolError("HPACK: truncated or oversized integer")
            byte = block[at]
            at += 1
            value += (byte & 127) << shift
            shift += 7
            if not byte & 128:
                return value, at

    def _string(self, block: bytes, at: int) -> Tuple[bytes, int]:
        if at >= len(block):
            raise ProtocolError("HPACK: truncated string")
        huffman = block[at] & 0x80
        length, at = self._int(block, at, 7)
        if at + length > len(block):
            raise ProtocolError("HPACK: truncated string")
        raw = block[at:at + length]
        return (huffman_decode(raw) if huffman else raw), at + length

    def _literal(self, block: bytes, at: int, prefix: int) -> Tuple[Octets, int]:
        index, at = self._int(block, at, prefix)
        if index:
            name = self._entry(index)[0]
        else:
            name, at = self._string(block, at)
        value, at = self._string(block, at)
        return (name, value), at

    def _entry(self, index: int) -> Octets:
        if 1 <= index <= len(_STATIC_OCTETS):
            return _STATIC_OCTETS[index - 1]
        if 0 < index - len(_STATIC_OCTETS) <= len(self.table):
            return self.table[index - len(_STATIC_OCTETS) - 1]
        raise ProtocolError("HPACK: index %d outside the tables" % index)

    def _add(self, field: Octets) -> None:
        entry = len(field[0]) + len(field[1]) + 32  # RFC 7541 4.1, on the octets
        self._evict(entry)
        if entry <= self.limit:
            self.table.insert(0, field)
            self.size += entry

    def _evict(self, room: int) -> None:
        while self.table and self.size + room > self.limit:
            name, value = self.table.pop()
            self.size -= len(name) + len(value) + 32
