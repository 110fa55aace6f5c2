#!/usr/bin/env python3
"""llm-d's KV-block index, computed as llm-d-kv-cache computes it (docs/kv-events.md, "What
llm-d computes"), for tests that check prefixd's KV-event stream against it.

- Keys (pkg/kvcache/kvblock/token_processor.go): a prompt's tokens in chunks of 16 (no partial
  chunk); key_i = FNV-64a(canonical CBOR of [key_{i-1}, chunk_i, extra]), extra nil for text;
  the first parent is the model's root: FNV-64a(CBOR [FNV-64a(hash seed), nil, model name]).
- Events (pkg/kvevents/pool.go): BlockStored maps each of the event's engine hashes to the key
  computed from its token_ids, chained on the key its parent_block_hash maps to (the model's
  root when nil or 0; the event is skipped when the parent is unknown), and adds
  (pod, lowercased medium) to each key; BlockRemoved takes (pod, medium) off the key its hash
  maps to, and forgets the mapping once no pod holds the key; AllBlocksCleared changes nothing.
- Scoring (pkg/kvcache/kvblock_scorer.go, LongestPrefix): a pod's score is the number of the
  prompt's keys, from the first, that it holds on any medium.

`python3 llmd_index.py --self-test` checks the CBOR encoder and FNV-64a on published vectors.
"""
import sys

FNV64_OFFSET = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3
BLOCK = 16


def fnv64a(data):
    h = FNV64_OFFSET
    for b in data:
        h = ((h ^ b) * FNV64_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def _head(major, n):
    """A CBOR item head in its shortest form (RFC 8949 section 4.2.1, canonical)."""
    if n < 24:
        return bytes([major << 5 | n])
    for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * size):
            return bytes([major << 5 | info]) + n.to_bytes(size, "big")
    raise ValueError(f"{n} does not fit a CBOR head")


def cbor(value):
    """Canonical CBOR of the values llm-d hashes: nil, integers, text strings and arrays."""
    if value is None:
        return b"\xf6"
    if isinstance(value, bool):
        return b"\xf5" if value else b"\xf4"
    if isinstance(value, int):
        return _head(0, value) if value >= 0 else _head(1, -1 - value)
    if isinstance(value, str):
        raw = value.encode("utf-8")
        return _head(3, len(raw)) + raw
    if isinstance(value, (list, tuple)):
        return _head(4, len(value)) + b"".join(cbor(v) for v in value)
    raise TypeError(f"no CBOR encoding here for {type(value).__name__}")


def block_key(parent, tokens, extra=None):
    return fnv64a(cbor([parent, tokens, extra]))


def root_key(model, hash_seed=""):
    return block_key(fnv64a(hash_seed.encode("utf-8")), None, model)


def prompt_keys(tokens, model, parent=None, hash_seed=""):
    """The keys of a prompt's whole 16-token chunks, chained from `parent` (None: the root)."""
    key = root_key(model, hash_seed) if parent is None else parent
    keys = []
    for i in range(0, len(tokens) - BLOCK + 1, BLOCK):
        key = block_key(key, list(tokens[i:i + BLOCK]))
        keys.append(key)
    return keys


def _fields(event):
    """(type, fields) of an event in either encoding (vLLM's tagged array, or a map)."""
    if isinstance(event, dict):
        return event.get("type"), event
    names = {"BlockStored": ["block_hashes", "parent_block_hash", "token_ids", "block_size",
                             "lora_id", "medium", "lora_name", "extra_keys"],
             "BlockRemoved": ["block_hashes", "medium"],
             "AllBlocksCleared": ["medium"]}.get(event[0], [])
    return event[0], dict(zip(names, event[1:]))


class Index:
    """llm-d's in-memory index: engine hash -> key, key -> {(pod, medium)}."""

    def __init__(self):
        self.engine_to_key = {}
        self.holders = {}
        self.events = 0
        self.skipped = 0  # BlockStored whose parent was unknown (llm-d skips them too)
        self.skipped_hashes = {}  # medium -> the engine hashes of those events
        self.removed = {}  # medium -> BlockRemoved hashes seen
        self.live = {}  # medium -> the engine hashes stored and not removed since, this pod or any

    def apply(self, topic, payload):
        _, pod, model = topic.split("@", 2)
        for event in payload[1]:
            self.events += 1
            kind, f = _fields(event)
            medium = (f.get("medium") or "gpu").lower()
            if kind == "BlockStored":
                self._stored(pod, model, medium, f)
            elif kind == "BlockRemoved":
                self.removed[medium] = self.removed.get(medium, 0) + len(f["block_hashes"])
                for h in f["block_hashes"]:
                    self._removed(pod, medium, h)

    def _stored(self, pod, model, medium, f):
        parent = None
        if f.get("parent_block_hash"):
            parent = self.engine_to_key.get(f["parent_block_hash"])
            if parent is None:
                self.skipped += 1
                n = self.skipped_hashes.get(medium, 0) + len(f["block_hashes"])
                self.skipped_hashes[medium] = n
                return
        keys = prompt_keys(f["token_ids"], f.get("lora_name") or model, parent)
        if len(keys) != len(f["block_hashes"]):
            raise ValueError(f"{len(f['block_hashes'])} hashes for {len(keys)} 16-token chunks")
        for engine, key in zip(f["block_hashes"], keys):
            self.engine_to_key[engine] = key
            self.holders.setdefault(key, set()).add((pod, medium))
            self.live.setdefault(medium, set()).add(engine)

    def _removed(self, pod, medium, engine):
        self.live.get(medium, set()).discard(engine)
        key = self.engine_to_key.get(engine)
        if key is None:
            return
        held = self.holders.get(key, set())
        held.discard((pod, medium))
        if not held:
            self.holders.pop(key, None)
            del self.engine_to_key[engine]

    def score(self, tokens, model, pod):
        """The pod's LongestPrefix match: whole 16-token chunks from the first that it holds."""
        n = 0
        for key in prompt_keys(tokens, model):
            if not any(p == pod for p, _ in self.holders.get(key, ())):
                break
            n += 1
        return n

    def media(self, pod):
        """How many keys the pod holds on each medium."""
        out = {}
        for held in self.holders.values():
            for p, medium in held:
                if p == pod:
                    out[medium] = out.get(medium, 0) + 1
        return out


def self_test():
    # RFC 8949 Appendix A, and FNV-64a's published test vectors (draft-eastlake-fnv).
    vectors = [(0, "00"), (23, "17"), (24, "1818"), (100, "1864"), (1000, "1903e8"),
               (1000000, "1a000f4240"), (1000000000000, "1b000000e8d4a51000"),
               (18446744073709551615, "1bffffffffffffffff"), (-1, "20"), (-100, "3863"),
               (None, "f6"), ("", "60"), ("IETF", "6449455446"), ([], "80"),
               ([1, 2, 3], "83010203"), ([1, [2, 3], [4, 5]], "8301820203820405"),
               (list(range(1, 26)), "98190102030405060708090a0b0c0d0e0f101112131415161718181819")]
    for value, want in vectors:
        got = cbor(value).hex()
        assert got == want, f"CBOR {value!r}: {got}, want {want}"
    for data, want in [(b"", 0xCBF29CE484222325), (b"a", 0xAF63DC4C8601EC8C),
                       (b"foobar", 0x85944171F73967E8)]:
        assert fnv64a(data) == want, f"FNV-64a {data!r}: {fnv64a(data):x}"
    # The chain: key 1 of 32 tokens is key 0 of the last 16 chained on key 0.
    toks = list(range(40))
    k = prompt_keys(toks, "m")
    assert len(k) == 2 and k[1] == block_key(k[0], toks[16:32]) and k[0] != root_key("m")
    print("llmd_index self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    else:
        sys.exit(__doc__)
