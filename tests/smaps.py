"""What /proc/self/smaps says of the memory under a tensor: the tests' own reading of whether
huge_pages' advice took, independent of the module's counters."""
import pytest
import torch

import ascendtile.huge_pages as hp

needs_thp = pytest.mark.skipif(hp._madvise() is None, reason="no transparent huge pages here (off, or not Linux)")


def mappings() -> list[dict]:
    """Every mapping of /proc/self/smaps: its range, AnonHugePages bytes and whether its VmFlags
    carry 'hg' (MADV_HUGEPAGE given)."""
    found = []
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if ":" not in fields[0]:  # a mapping's first line: "start-end perms offset dev inode [path]"
                start, end = (int(v, 16) for v in fields[0].split("-"))
                found.append({"start": start, "end": end, "huge": 0, "advised": False})
            elif fields[0] == "AnonHugePages:":
                found[-1]["huge"] = int(fields[1]) * 1024
            elif fields[0] == "VmFlags:":
                found[-1]["advised"] = "hg" in fields[1:]
    return found


def mapping_of(tensor: torch.Tensor) -> dict:
    """The memory under tensor's storage, over every mapping it spans (advice splits a mapping at
    block boundaries, so a storage's unadvised first or last partial block is a mapping of its own):
    "advised", whether every mapping over its whole 2 MiB blocks carries 'hg'; "huge", the
    AnonHugePages bytes of the mappings it spans, each counted up to its overlap with the storage."""
    begin = tensor.untyped_storage().data_ptr()
    end = begin + tensor.untyped_storage().nbytes()
    inner = (-(-begin // hp.HUGE_PAGE) * hp.HUGE_PAGE, end // hp.HUGE_PAGE * hp.HUGE_PAGE)
    spanned = [m for m in mappings() if m["start"] < end and begin < m["end"]]
    assert spanned, "the tensor's storage is in no mapping of /proc/self/smaps"
    return {"advised": all(m["advised"] for m in spanned if m["start"] < inner[1] and inner[0] < m["end"]),
            "huge": sum(min(m["huge"], min(end, m["end"]) - max(begin, m["start"])) for m in spanned)}
