#!/bin/bash
# t6440: files whose sizes lie are refused before anything is allocated from the lie: an .npz
# whose central directory puts a member at offset 2^63 (a zip64 field) is refused naming where,
# before a pointer is made of it; gem-init --init-from /dev/zero, or a safetensors file longer
# than the model's θ can be, is refused from its header or its length, not read to its end;
# a gzip'd IDX file whose trailer claims 4 GiB reserves no more than its header needs (under a
# 1 GiB address-space limit: the trailer's lie is then found by zlib's length check).
. "$(dirname "$0")/test-lib.sh"

# fails CODE MESSAGE COMMAND...: COMMAND exits with CODE and says MESSAGE (grep -E) on stderr
fails() {
	_want=$1 _msg=$2; shift 2
	"$@" 2>err; _rc=$?
	cat err
	test "$_rc" = "$_want" || { echo "exit $_rc, want $_want"; return 1; }
	grep -qE "$_msg" err
}

# asan: the programs are built with AddressSanitizer or ThreadSanitizer (which reserve terabytes
# of address space: no ulimit -v for them); gcc links the runtime as a library, clang into the
# program, and both name its entry point
asan() { grep -qaE '__(asan|tsan)_init' "$GEM_BIN/gem-init"; }

test_expect_success 'setup' '
	make_tiny_data data
'

test_expect_success 'an .npz member at offset 0xFFFFFFFF, 2^63 in its zip64 field: refused' '
	python3 - <<-\PY &&
	import struct, zlib
	def npy(descr, shape, payload):
	    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
	    h += " " * (63 - (10 + len(h)) % 64) + "\n"
	    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + payload
	members = [("x_train.npy", npy("<f4", (40, 64), struct.pack("<2560f", *[0.5] * 2560))),
	           ("y_train.npy", npy("<i8", (40,), struct.pack("<40q", *[i % 4 for i in range(40)])))]
	out, cd = bytearray(), bytearray()
	for name, data in members:
	    crc, at, nm = zlib.crc32(data), len(out), name.encode()
	    out += struct.pack("<IHHHHHIIIHH", 0x04034b50, 45, 0, 0, 0, 0x21, crc, len(data),
	                       len(data), len(nm), 0) + nm + data
	    lie = name == "x_train.npy"
	    extra = struct.pack("<HHQ", 1, 8, 1 << 63) if lie else b""
	    cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 45, 45, 0, 0, 0, 0x21, crc,
	                      len(data), len(data), len(nm), len(extra), 0, 0, 0, 0,
	                      0xFFFFFFFF if lie else at) + nm + extra
	end = struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, 2, 2, len(cd), len(out), 0)
	open("lie.npz", "wb").write(out + cd + end)
	PY
	fails 1 "x_train.npy: .* at offset 9223372036854775808 lie outside the file" \
		gem-init -q --model tiny.json --data npz:lie.npz run-npz &&
	test ! -e run-npz
'

test_expect_success 'gem-init --init-from /dev/zero: refused from its header, at once' '
	fails 1 "/dev/zero: not a safetensors file \(a header of 0 bytes\)" \
		timeout 20 gem-init -q --model tiny.json --data data --init-from /dev/zero run-zero &&
	test ! -e run-zero
'

test_expect_success 'a safetensors file longer than the model'"'"'s θ can be: refused by its length' '
	gem-init -q --model tiny.json --data data run &&
	gem-export -o theta.safetensors run &&
	cp theta.safetensors long.safetensors &&
	head -c 100000 /dev/zero >>long.safetensors &&
	fails 2 "long.safetensors: [0-9]+ bytes, more than a safetensors file of this model.s 1108 parameters can be" \
		gem-init -q --model tiny.json --data data --init-from long.safetensors run-long &&
	test ! -e run-long &&
	gem-init -q --model tiny.json --data data --init-from theta.safetensors run-ok
'

test_expect_success 'a gzip trailer that claims 4 GiB reserves what the IDX header needs' '
	mkdir lie &&
	python3 - <<-\PY &&
	import gzip, os, random, struct
	random.seed(5)
	n = 70000
	img = struct.pack(">IIII", 0x803, n, 8, 8) + os.urandom(n * 64)
	z = bytearray(gzip.compress(img, 1))
	assert len(z) > (1 << 32) // 1032, len(z)
	z[-4:] = struct.pack("<I", 0xFFFFFFF0)
	open("lie/train-images-idx3-ubyte.gz", "wb").write(z)
	open("lie/train-labels-idx1-ubyte", "wb").write(
	    struct.pack(">II", 0x801, n) + bytes(random.randrange(4) for _ in range(n)))
	PY
	cp data/t10k-* lie/ &&
	if asan; then lim=unlimited; else lim=1048576; fi &&
	fails 1 "train-images-idx3-ubyte.gz: corrupt gzip data \(incorrect length check\)" \
		sh -c "ulimit -v $lim && exec gem-init -q --model tiny.json --data lie run-gz"
'

test_expect_success 'a small trailer lie is refused too; the honest file still reads' '
	mkdir small && cp data/* small/ &&
	python3 -c "
import struct
p = \"small/train-images-idx3-ubyte.gz\"; z = bytearray(open(p, \"rb\").read())
z[-4:] = struct.pack(\"<I\", struct.unpack(\"<I\", z[-4:])[0] + 100)
open(p, \"wb\").write(z)" &&
	fails 1 "corrupt gzip data \(incorrect length check\)" \
		gem-init -q --model tiny.json --data small run-small &&
	gem-init -q --model tiny.json --data data run-data
'

test_done
