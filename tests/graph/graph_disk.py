"""The disk of a graph job: a fresh ext4 file system of a hosted runner's size, loop-mounted (sparse: it costs what
is written) and always removed, and the peak of what the job used on it."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)


@contextmanager
def loop_disk(image: Path, mountpoint: Path, size_gb: int) -> Iterator[Path]:
    """A fresh ext4 file system of size_gb (sparse: it costs what is written), mounted; always removed."""
    subprocess.run(["truncate", "-s", f"{size_gb}G", str(image)], check=True)
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
        mountpoint.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-o", "loop", str(image), str(mountpoint)], check=True)
        try:
            yield mountpoint
        finally:
            unmount(mountpoint)
    finally:
        image.unlink(missing_ok=True)


def unmount(mountpoint: Path, tries: int = 20) -> None:
    """umount, again every 0.5 s while a process the job left behind still exits (GitHub's runner ends a job's
    orphans; here they end on their own or the mount stays busy); the processes still holding it are logged."""
    for _ in range(tries):
        if subprocess.run(["umount", str(mountpoint)], check=False, capture_output=True).returncode == 0:
            return
        time.sleep(0.5)
    for proc in Path("/proc").iterdir():
        try:
            held = any(str(p.readlink()).startswith(str(mountpoint)) for p in (proc / "fd").iterdir())
            if held or str((proc / "cwd").readlink()).startswith(str(mountpoint)):
                log.warning("%s still holds %s: %s", proc.name, mountpoint, (proc / "cmdline").read_bytes()[:200])
        except OSError:
            continue
    subprocess.run(["umount", str(mountpoint)], check=True)


class DiskWatch:
    """The peak of used bytes on a file system, sampled every `every` seconds and on demand."""

    def __init__(self, path: Path, every: float = 0.5) -> None:
        self.path, self.every, self.peak = path, every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        st = os.statvfs(self.path)
        self.peak = max(self.peak, (st.f_blocks - st.f_bfree) * st.f_frsize)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def __enter__(self) -> DiskWatch:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
