"""What /proc/self/smaps says of the memory under a tensor: the tests' own reading of whether
huge_pages' advice took, independent of the module's counters."""
import pytest
import torch

import ascendtile.huge_pages as hp

needs_thp = pytest.mark.skipif(hp._madvise() is None, reason="no transparent huge pages here (off, or not Linux)")


def mapping_of(tensor: torch.Tensor) -> dict:
    """The smaps entry of the mapping that holds tensor's storage: its AnonHugePages bytes ("huge")
    and whether its VmFlags carry 'hg', MADV_HUGEPAGE given ("advised")."""
    address = tensor.untyped_storage().data_ptr()
    found = None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if ":" not in fields[0]:  # a mapping's first line: "start-end perms offset dev inode [path]"
                start, end = (int(v, 16) for v in fields[0].split("-"))
                if found is not None:
                    break
                if start <= address < end:
                    found = {"huge": 0, "advised": False}
            elif found is not None and fields[0] == "AnonHugePages:":
                found["huge"] = int(fields[1]) * 1024
            elif found is not None and fields[0] == "VmFlags:":
                found["advised"] = "hg" in fields[1:]
    assert found is not None, "the tensor's storage is in no mapping of /proc/self/smaps"
    return found
