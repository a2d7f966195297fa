#!/usr/bin/env python3
# File: tests/fuzz/make_image_seeds.py
#
# Writes the hand-made seeds of tests/corpus/image/ (small, mostly malformed
# images for the image reader's fuzz target and corpus test). Real nvcc output
# is not committed: the build generates it (tests/ptx_rewriter/CMakeLists.txt)
# and the corpus test reads it from there too.
#
#   python3 tests/fuzz/make_image_seeds.py   # needs the zstd command-line tool
import struct, subprocess, os
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'corpus', 'image')
def w(name, data): open(os.path.join(out, name), 'wb').write(data)
def pad8(b): return b + b'\0' * (-len(b) % 8)

PTX = b'.version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\nret;\n}\n\0'

def entry(kind, payload, arch=90, flags=0x11, csz=0, dsz=0, major=9, minor=0, ext=b'', optdesc=0, nameoff=0, namelen=0):
    hs = 64 + len(ext)
    p = pad8(payload)
    h = struct.pack('<HHIQIIHHIIIQQQ', kind, 0x101, hs, len(p), csz, optdesc, minor, major, arch, nameoff, namelen, flags, 0, dsz)
    return h + ext + p

def container(entries):
    body = b''.join(entries)
    return struct.pack('<IHHQ', 0xBA55ED50, 1, 16, len(body)) + body

def lz4_literals(data):
    n = len(data)
    if n < 15:
        return bytes([n << 4]) + data
    out = bytes([0xF0]); rest = n - 15
    while rest >= 255: out += b'\xff'; rest -= 255
    return out + bytes([rest]) + data

zstd = subprocess.run(['zstd', '-q', '-c', '-19'], input=PTX, capture_output=True, check=True).stdout
lz4 = lz4_literals(PTX)

w('wrapper_v1.bin', struct.pack('<iiQQ', 0x466243b1, 1, 0x1000, 0))
w('fatbin_empty.bin', container([]))
w('fatbin_truncated_header.bin', container([])[:12])
plain = container([entry(1, PTX)])
w('fatbin_tiny_ptx_plain.bin', plain)
w('fatbin_tiny_ptx_zstd.bin', container([entry(1, zstd, flags=0x8011, csz=len(zstd), dsz=len(PTX))]))
w('fatbin_tiny_ptx_zstd_lying.bin', container([entry(1, zstd, flags=0x8011, csz=len(zstd), dsz=len(PTX) + 1)]))
lz = container([entry(1, lz4, flags=0x2011, csz=len(lz4), dsz=len(PTX))])
w('fatbin_tiny_ptx_lz4.bin', lz)
w('fatbin_tiny_ptx_lz4_lying.bin', container([entry(1, lz4, flags=0x2011, csz=len(lz4), dsz=len(PTX) * 300)]))
w('fatbin_two_containers.bin', plain + b'\0' * 8 + lz)
lying = bytearray(plain); struct.pack_into('<Q', lying, 16 + 8, 123456)
w('fatbin_lying_payload.bin', bytes(lying))
# Entry with options descriptor at +0x40 -> {0x48, 8} "-O3", and name at +0x50 "a.cu".
ext = struct.pack('<II', 0x48, 8) + b'-O3\0\0\0\0\0' + b'a.cu\0\0\0\0'
w('fatbin_name_options.bin', container([entry(1, PTX, ext=ext, optdesc=0x40, nameoff=0x50, namelen=4)]))

# A minimal cubin: null, .shstrtab, .strtab, .symtab, .text.k; one kernel 'k'.
def elf(machine, sections, flags=0, abiver=8, etype=2):
    # sections: list of (name, type, data, link, info, entsize)
    shstr = b'\0' + b''.join(n.encode() + b'\0' for n, *_ in sections) + b'.shstrtab\0'
    names = []; pos = 1
    for n, *_ in sections: names.append(pos); pos += len(n) + 1
    shstr_name = pos
    blobs = b''; offs = []
    off = 64
    allsec = sections + [('.shstrtab', 3, shstr, 0, 0, 0)]
    names.append(shstr_name)
    for s in allsec:
        offs.append(off + len(blobs)); blobs += pad8(s[2])
    shoff = 64 + len(blobs)
    ident = b'\x7fELF' + bytes([2, 1, 1, 0x41, abiver]) + b'\0' * 7
    hdr = ident + struct.pack('<HHIQQQIHHHHHH', etype, machine, 1, 0, 0, shoff, flags, 64, 56, 0, 64, len(allsec) + 1, len(allsec))
    sh = b'\0' * 64
    for i, s in enumerate(allsec):
        n, t, d, link, info, ent = s
        sh += struct.pack('<IIQQQQIIQQ', names[i], t, 6 if n.startswith('.text') else 0, 0, offs[i], len(d), link, info, 4, ent)
    return hdr + blobs + sh

strtab = b'\0k\0helper\0'
text = b'\0' * 32
syms = b'\0' * 24
syms += struct.pack('<IBBHQQ', 3, 0x03, 0, 4, 0, 0)        # SECTION symbol for .text.k
syms += struct.pack('<IBBHQQ', 1, 0x12, 0x10, 4, 0, 16)    # GLOBAL FUNC k, kernel
syms += struct.pack('<IBBHQQ', 3, 0x02, 0, 4, 16, 16)      # LOCAL FUNC helper
cubin = elf(190, [('.strtab', 3, strtab, 0, 0, 0), ('.symtab', 2, syms, 1, 2, 24),
                  ('.text.k', 1, text, 2, 0, 0)], flags=0x6005a04)
w('cubin_tiny.bin', cubin)
w('cubin_header_only.bin', cubin[:64])
host = elf(62, [('.text', 1, b'\x90' * 16, 0, 0, 0), ('.nv_fatbin', 1, plain + b'\0' * 8, 0, 0, 0)], flags=0, abiver=0, etype=3)
w('host_elf_tiny.bin', host)
w('ptx_tiny.ptx', b'// hand-made\n.version 9.0\n.target sm_90a\n.address_size 64\n')
w('ptx_no_version.ptx', b'// a comment, then no .version\n.target sm_90\n')
w('ptx_bad_version.ptx', b'.version 9.x\n.target sm_90\n')
