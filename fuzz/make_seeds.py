#!/usr/bin/python3
"""Writes the hand-made seeds (corpus/NAME/) and the reproducers of crashes and wrong answers found before
(reproducers/NAME/). Plain mutation rarely reaches deep nesting or a size that overflows to 0, so these
start the fuzzers there. Run from fuzz/: ./make_seeds.py (the output is committed)."""
import json, os, struct

def write(folder, name, data):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())

def safetensors(header, data=b"", pad=True, length_delta=0):
    h = header.encode() if isinstance(header, str) else header
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h) + length_delta) + h + data

# ---- safetensors ------------------------------------------------------------------------------------
C, R = "corpus/safetensors", "reproducers/safetensors"
valid = json.dumps({"__metadata__": {"format": "oar"},
                    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                    "b": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]}})
write(C, "valid", safetensors(valid, struct.pack("<ffq", 1.0, 2.0, 7)))
write(C, "empty_tensors", safetensors(json.dumps({"e": {"dtype": "BF16", "shape": [0, 4], "data_offsets": [0, 0]},
                                                  "z": {"dtype": "BOOL", "shape": [], "data_offsets": [0, 1]}}), b"\x01"))
write(C, "every_dtype", safetensors(json.dumps({t: {"dtype": t, "shape": [1], "data_offsets": [i * 8, i * 8 + s]}
                                                for i, (t, s) in enumerate([("F64", 8)])}), b"\0" * 8))
write(C, "nested_shape_200", safetensors('{"a":{"dtype":"F32","shape":' + "[" * 200 + "]" * 200 + ',"data_offsets":[0,4]}}', b"\0" * 4))
write(C, "nested_unclosed", safetensors('{"a":{"dtype":' + "[" * 300))
write(C, "shape_overflow", safetensors('{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}'))
write(C, "partial_product_leaves_int64", safetensors('{"a":{"dtype":"I8","shape":[4611686018427387904,3,0],"data_offsets":[0,0]}}'))
write(C, "header_length_huge", struct.pack("<Q", 2**63) + b"{}")
write(C, "gap", safetensors('{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', b"\0" * 8))
write(C, "overlap", safetensors('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}', b"\0" * 8))
# Reproducers from issue 14: a stack overflow while quoting 100,000 nested '[' (crash), a header length 3
# bytes short, trailing bytes and a shape whose byte size overflows to 0 (all accepted, wrong weights).
write(R, "deep_nesting_100000_crash", safetensors('{"w":{"dtype":"F32","shape":' + "[" * 100000 + "]" * 100000 + ',"data_offsets":[0,4]}}', b"\0" * 4))
write(R, "header_3_bytes_short", safetensors(valid, struct.pack("<ffq", 1.0, 2.0, 7), length_delta=-3))
write(R, "trailing_junk", safetensors(valid, struct.pack("<ffq", 1.0, 2.0, 7) + b"junk"))
write(R, "size_overflows_to_zero", safetensors('{"a":{"dtype":"I8","shape":[65536,65536,65536,65536],"data_offsets":[0,0]}}'))

# ---- checkpoint config ------------------------------------------------------------------------------
C, R = "corpus/checkpoint_config", "reproducers/checkpoint_config"
cfg = {"format": "oar-example-checkpoint", "version": 1, "kind": "mlp", "seed": 3, "weights": "model.safetensors",
       "model": {"hidden": 64, "layers": 2}}
write(C, "valid", json.dumps(cfg, indent=2))
write(C, "seed_negative", json.dumps(dict(cfg, seed=-1)))
write(C, "seed_too_big", json.dumps(cfg).replace('"seed": 3', '"seed": 18446744073709551616'))
write(C, "kind_number", json.dumps(dict(cfg, kind=7)))
write(C, "model_list", json.dumps(dict(cfg, model=[1, 2])))
write(C, "unicode", json.dumps(dict(cfg, kind="m\u00e9l\U0001f600"), ensure_ascii=False))
write(C, "nested_model_60", '{"kind":"mlp","seed":1,"model":{"a":' + "[" * 60 + "]" * 60 + "}}")
write(R, "deep_nesting_100000_crash", '{"kind":"mlp","seed":1,"model":' + "[" * 100000 + "]" * 100000 + "}")

# ---- DLPack (layout in dlpack_fuzzer.cc) ------------------------------------------------------------
C, R = "corpus/dlpack", "reproducers/dlpack"
def dl(shape, strides=None, offset=0, device=1, code=2, bits=32, lanes=1, ndim=None):
    n = len(shape) if ndim is None else ndim
    b = struct.pack("<BBBBbBQ", device, code, bits, lanes, n, 1 if strides is not None else 0, offset)
    b += b"".join(struct.pack("<q", x) for x in shape)
    if strides is not None:
        b += b"".join(struct.pack("<q", x) for x in strides)
    return b
write(C, "contiguous_2x3", dl([2, 3]))
write(C, "strided_view", dl([2, 3], [1, 2], offset=4))
write(C, "scalar", dl([]))
write(C, "int64", dl([4], code=0, bits=64))
write(C, "bf16", dl([4], code=4, bits=16))
write(C, "lanes4", dl([4], lanes=4))
write(C, "rank9", dl([1] * 9))
write(C, "negative_extent", dl([-1, 2]))
write(C, "negative_stride", dl([2], [-1]))
write(C, "zero_extent_big_stride", dl([0, 2], [2**62, 1]))
write(R, "huge_byte_offset_crash", dl([2], offset=2**64 - 8))
write(R, "element_count_overflow", dl([2**32, 2**32]))
write(R, "stride_span_overflow", dl([2**40, 2], [2**40, 1]))

# ---- device names -----------------------------------------------------------------------------------
C = "corpus/device_name"
for i, n in enumerate(["cpu", "cpu:0", "kunlun_sim:1", "ascend_sim:0", "cuda:-1", "cpu:99999999999", "cpu:",
                       ":0", "CPU", "a:b:c", "x" * 300 + ":1", "cpu: 1", "cpu:+1", "cpu:0x1"]):
    write(C, "name%02d" % i, n)

# ---- OAR_SIM_FAULTS ---------------------------------------------------------------------------------
C = "corpus/sim_faults"
for i, s in enumerate(["alloc:after=2,device=0", "launch:op=matmul,after=3;copy:rate=0.01,seed=7,dir=h2d,code=internal",
                       "device_lost:after=50,plugin=ascend_sim,device=0", "launch:op=add,mode=sync,count=3",
                       "alloc:after=100, launch:op=exp,after=3;copy:dir=p2p", "launch:op=nosuchop",
                       "alloc:plugin=kunlun", "alloc:count=0", "copy:dir=sideways", "launch:rate=1.5", ";;,,",
                       "after=3", "alloc:device=64", "copy:code=internal,mode=sync", "launch:op=format_cast,rate=1e-3"]):
    write(C, "spec%02d" % i, s)

# ---- other environment grammars (selector byte, then the value) -------------------------------------
C, R = "corpus/env_grammars", "reproducers/env_grammars"
for i, v in enumerate([b"\x00512M", b"\x004096", b"\x001tb", b"\x00M", b"\x01true", b"\x01maybe", b"\x01OFF",
                       b"\x02debug", b"\x02warn", b"\x02loud", b"\x03/a:/b::/c:", b"\x03:::",
                       b"\x04\x0016M", b"\x04\x0165", b"\x04\x027", b"\x04\x030", b"\x04\x04soon", b"\x04\x00 2 G "]):
    write(C, "value%02d" % i, v)
# Found while writing the target: 15 digits and a T wrapped around 2^64 to a small size.
write(R, "byte_size_wraps_around", b"\x00999999999999999T")

# ---- the TCP store's requests (control byte: client = byte % 3, chunk length = byte / 4 + 1; then the chunk) ----
C = "corpus/tcp_store"
def store_request(op, key, value=b""):
    return op + struct.pack("<II", len(key), len(value)) + key + value
def chunked(client, b, n=8):
    return b"".join(bytes([(len(b[i:i + n]) - 1) * 4 + client]) + b[i:i + n] for i in range(0, len(b), n))
write(C, "set_then_get", chunked(0, store_request(b"S", b"ccl/id", b"abcdef")) + chunked(1, store_request(b"G", b"ccl/id")))
write(C, "get_waits_then_set", chunked(2, store_request(b"G", b"shm")) + chunked(1, store_request(b"S", b"shm", b"/oar-x"), 3))
write(C, "bad_op", chunked(0, b"X" + struct.pack("<II", 1, 0) + b"k") + chunked(0, store_request(b"S", b"a", b"b")))
write(C, "huge_length", chunked(1, b"S" + struct.pack("<II", 0xffffffff, 0xffffffff)))
write(C, "get_with_value", chunked(2, store_request(b"G", b"k", b"v")))
print("seeds written")
