"""The BLAS a library carries inside itself: PyTorch's wheels link MKL, oneDNN and FBGEMM statically into
libtorch_cpu.so, so a program counter in that file may be ATen's own code (the dispatcher, the allocator, the
element-wise loops that change a call's inputs) or a matrix product that someone else wrote. The library's own
symbol table (.symtab, kept in the wheels) says which: `ranges(path)` gives the address ranges of the functions whose
names are a BLAS's, and attribution.py counts a sample there as "blas".

Read once per library file (0.3 s for libtorch_cpu.so's 500,000 symbols, and 100 MB of its pages touched) in a
process of its own (`python -m cudagent.evaluator.audit.bundled_blas PATH`), so that the evaluator's memory does not
carry the table; the ranges are kept in the cache (`bundled_blas/`, by the file's device, inode, size and time) and
in this process. A library without a symbol table, or one that cannot be read, has no ranges and its samples keep
their library's kind.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import mmap
import os
import struct
import subprocess
import sys
import tempfile

# Names of the BLAS and deep-learning libraries a torch build links in (C names, Fortran BLAS names, C++ namespaces).
PREFIXES = (b"mkl_", b"MKL_", b"cblas_", b"LAPACKE_", b"dnnl_", b"_ZN4dnnl", b"_ZN6fbgemm", b"mkldnn_")
FORTRAN_BLAS = {
    p + op + b"_"
    for p in (b"s", b"d", b"c", b"z")
    for op in (b"gemm", b"gemv", b"ger", b"axpy", b"dot", b"scal", b"copy", b"trsm", b"trmm", b"symm", b"syrk", b"nrm2")
}

_SHT_SYMTAB, _STT_FUNC, _PT_LOAD = 2, 2, 1
_cache: dict[tuple, tuple[list[int], list[int], list[tuple[int, int, int]]]] = {}


def ranges(path: str, identity: tuple) -> tuple[list[int], list[int], list[tuple[int, int, int]]] | None:
    """(starts, ends, loads) of the BLAS functions in the library at `path` if it is the file `identity` names
    ((device major, minor, inode)); loads: (file offset, virtual address, size) of its PT_LOAD segments. None if
    it cannot be read or holds no BLAS."""
    if identity in _cache:
        return _cache[identity] or None
    found = None
    try:
        st = os.stat(path)
        if (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino) == identity:
            found = _cached(path, st)
    except (OSError, ValueError, subprocess.SubprocessError):
        found = None
    _cache[identity] = found or ()
    return found


def _cached(path: str, st: os.stat_result):
    """The ranges of the file at `path` from the cache, else read in a process of its own and kept there."""
    from cudagent.resources import PACKAGE_DIR, cache_dir

    key = f"{path}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}".encode()
    root = cache_dir() / "bundled_blas"
    kept = root / f"{hashlib.sha256(key).hexdigest()[:32]}.json"
    try:
        return _table(json.loads(kept.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        pass
    out = subprocess.run(
        [sys.executable, "-m", __name__, path],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=PACKAGE_DIR.parent,  # where `cudagent` imports from, installed or not
    ).stdout
    table = json.loads(out)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=root, delete=False, suffix=".tmp") as f:
        f.write(out)
    os.replace(f.name, kept)
    return _table(table)


def _table(data):
    if data is None:
        return None
    return list(data["starts"]), list(data["ends"]), [tuple(x) for x in data["loads"]]


def contains(table, vaddr: int) -> bool:
    starts, ends, _ = table
    i = bisect.bisect_right(starts, vaddr) - 1
    return i >= 0 and vaddr < ends[i]


def vaddr_of(table, file_offset: int) -> int | None:
    """The virtual address (as the symbol table counts) of a byte at `file_offset` of the file."""
    for offset, vaddr, size in table[2]:
        if offset <= file_offset < offset + size:
            return vaddr + (file_offset - offset)
    return None


def _read(path: str):
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"\x7fELF" or m[4] != 2:  # 64-bit ELF only
            return None
        phoff, shoff = struct.unpack_from("<QQ", m, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", m, 0x36)
        loads = []
        for i in range(phnum):
            header = struct.unpack_from("<IIQQQQ", m, phoff + i * phentsize)
            p_type, p_offset, p_vaddr, p_filesz = header[0], header[2], header[3], header[5]
            if p_type == _PT_LOAD:
                loads.append((p_offset, p_vaddr, p_filesz))
        sections = [struct.unpack_from("<IIQQQQIIQQ", m, shoff + i * shentsize) for i in range(shnum)]
        symtab = next((s for s in sections if s[1] == _SHT_SYMTAB), None)
        if symtab is None:
            return None
        strtab = sections[symtab[6]]
        str_off, sym_off, sym_size, entsize = strtab[4], symtab[4], symtab[5], symtab[9] or 24
        spans = []
        for name, info, _other, _shndx, value, size in struct.iter_unpack(
            "<IBBHQQ", m[sym_off : sym_off + sym_size - sym_size % entsize]
        ):
            if info & 0xF != _STT_FUNC or not value or not size:
                continue
            start = str_off + name
            head = m[start : start + 16]
            if head.startswith(PREFIXES) or head.split(b"\0", 1)[0] in FORTRAN_BLAS:
                spans.append((value, value + size))
    if not spans:
        return None
    spans.sort()
    starts, ends = [], []
    for a, b in spans:  # merged, so that one bisect finds the span
        if starts and a <= ends[-1]:
            ends[-1] = max(ends[-1], b)
        else:
            starts.append(a)
            ends.append(b)
    return starts, ends, loads


if __name__ == "__main__":
    try:
        found = _read(sys.argv[1])
    except (OSError, ValueError, struct.error):
        found = None
    print(json.dumps(found and {"starts": found[0], "ends": found[1], "loads": found[2]}))
