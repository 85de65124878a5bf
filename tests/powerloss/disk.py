"""The disk a power loss leaves, rebuilt from a recording (staal.records.fsio).

The model is ALICE's (Pillai et al., OSDI 2014), for an ordered-metadata
file system such as ext4: a file's bytes are durable up to its last fsync,
and what was written after it may be lost, kept, or kept only in part (cut
at a write's end, which for the logs is a line's end, or in the middle of
one); a name made, renamed or removed is durable once its directory is
fsync'd, and the names not yet durable reach the disk in the order they
were changed, so a crash keeps some first part of them.

`Disk` replays operations one at a time; `crash_states` lists every state a
power loss at that moment could leave, each a `State`: a mapping of
relative path to file content (None for a directory), materialized by
`write_state`.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DIR = None  # a directory's entry in a state
State = tuple[tuple[str, bytes | None], ...]  # sorted (relative path, content)


@dataclass
class Inode:
    data: bytearray
    durable: bytes
    # Where each write since the last fsync ended: the places a tear may cut.
    ends: list[int] = field(default_factory=list)

    def sync(self) -> None:
        self.durable, self.ends = bytes(self.data), []

    def versions(self) -> list[bytes]:
        """What the file may hold after a crash, the durable bytes first."""
        now = bytes(self.data)
        if now == self.durable:
            return [now]
        if not now.startswith(self.durable):
            return [self.durable, now]  # truncated or overwritten: one or the other
        cuts = {len(self.durable), len(now)}
        cuts.update(end for end in self.ends if len(self.durable) < end < len(now))
        starts = sorted(cuts)
        # Torn mid-write: half of the first unsynced write and of the last.
        for begin, end in (starts[:2], starts[-2:]):
            if end - begin > 1:
                cuts.add(begin + (end - begin) // 2)
        return [now[:cut] for cut in sorted(cuts)]


@dataclass(frozen=True)
class NameOp:
    kind: str  # create, mkdir, rename, unlink
    path: str
    inode: int | None = None
    source: str | None = None

    @property
    def dirs(self) -> set[str]:
        parents = {os.path.dirname(self.path)}
        if self.source is not None:
            parents.add(os.path.dirname(self.source))
        return parents

    def apply(self, names: dict[str, int | None]) -> None:
        if self.kind in ("create", "mkdir"):
            names[self.path] = self.inode
        elif self.kind == "rename":
            if self.source in names:
                names[self.path] = names.pop(self.source)
        elif self.kind == "unlink":
            names.pop(self.path, None)


class Disk:
    """The files under `root`, as the page cache holds them and as the disk
    does, replayed from recorded operations."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.inodes: dict[int, Inode] = {}
        self.names: dict[str, int | None] = {}  # relative path -> inode (None: a directory)
        self.durable: dict[str, int | None] = {}
        self.pending: list[NameOp] = []
        self.fds: dict[tuple[int, int], int] = {}
        self.writers: set[int] = set()  # the processes whose operations were replayed

    @classmethod
    def snapshot(cls, root: Path) -> Disk:
        """The files under `root` now, all durable (the scenario synced them)."""
        disk = cls(root)
        for path in sorted(root.rglob("*")):
            rel = str(path.relative_to(root))
            if path.is_dir():
                disk.names[rel] = None
            else:
                disk.names[rel] = disk._new_inode(path.read_bytes())
        disk.durable = dict(disk.names)
        return disk

    def _new_inode(self, data: bytes = b"") -> int:
        number = len(self.inodes) + 1
        self.inodes[number] = Inode(bytearray(data), bytes(data))
        return number

    def relative(self, path: str | None) -> str | None:
        if path is None:
            return None
        try:
            return str(Path(path).relative_to(self.root))
        except ValueError:
            return None  # outside the journal directory

    # -- replay ---------------------------------------------------------------

    def apply(self, op: dict[str, Any]) -> bool:
        """Replay one recorded operation; whether it concerned this disk."""
        kind, rel = op["op"], self.relative(op.get("path"))
        if rel is None:
            return False
        handler = getattr(self, "_" + kind)
        handler(op, rel)
        self.writers.add(op["pid"])
        return True

    def _open(self, op: dict[str, Any], rel: str) -> None:
        if op["created"] or rel not in self.names:
            inode = self._new_inode()
            self._change(NameOp("create", rel, inode))
        self.fds[(op["pid"], op["fd"])] = self.names[rel]

    def _inode_of(self, op: dict[str, Any]) -> Inode:
        return self.inodes[self.fds[(op["pid"], op["fd"])]]

    def _write(self, op: dict[str, Any], rel: str) -> None:
        inode, data, at = self._inode_of(op), base64.b64decode(op["data"]), op["offset"]
        if len(inode.data) < at:
            inode.data.extend(bytes(at - len(inode.data)))
        inode.data[at:at + len(data)] = data
        inode.ends.append(at + len(data))

    def _truncate(self, op: dict[str, Any], rel: str) -> None:
        inode = self._inode_of(op)
        del inode.data[op["size"]:]

    def _fsync(self, op: dict[str, Any], rel: str) -> None:
        self._inode_of(op).sync()

    def _dirsync(self, op: dict[str, Any], rel: str) -> None:
        directory = "" if rel == "." else rel
        still = []
        for change in self.pending:
            if directory in change.dirs:
                change.apply(self.durable)
            else:
                still.append(change)
        self.pending = still

    def _rename(self, op: dict[str, Any], rel: str) -> None:
        self._change(NameOp("rename", rel, source=self.relative(op["source"])))

    def _unlink(self, op: dict[str, Any], rel: str) -> None:
        self._change(NameOp("unlink", rel))

    def _mkdir(self, op: dict[str, Any], rel: str) -> None:
        self._change(NameOp("mkdir", rel))

    def _change(self, change: NameOp) -> None:
        change.apply(self.names)
        self.pending.append(change)

    # -- crashing -------------------------------------------------------------

    def crash_states(self) -> Iterator[State]:
        """Every state a power loss now could leave (with repeats; the caller
        drops them). The names: the durable ones, plus each first part of
        the changes not yet durable (skipping parts that end inside a run
        of mkdirs, which only add empty directories). The bytes, for each
        set of names: every file as durable, every file as written, and
        each file alone in each of its versions with the others as written.
        """
        prefixes = [n for n in range(len(self.pending) + 1)
                    if n in (0, len(self.pending)) or self.pending[n - 1].kind != "mkdir"]
        for count in prefixes:
            names = dict(self.durable)
            for change in self.pending[:count]:
                change.apply(names)
            files = sorted(inode for inode in names.values() if inode is not None)
            yield self._state(names, {inode: self.inodes[inode].durable for inode in files})
            written = {inode: bytes(self.inodes[inode].data) for inode in files}
            yield self._state(names, written)
            for inode in files:
                for version in self.inodes[inode].versions():
                    yield self._state(names, {**written, inode: version})

    @staticmethod
    def _state(names: dict[str, int | None], content: dict[int, bytes]) -> State:
        """Only what is reachable: an entry whose directory is gone is lost."""
        reachable = []
        for rel, inode in sorted(names.items()):
            parent = os.path.dirname(rel)
            if parent and names.get(parent, 0) is not None:
                continue  # the parent is not a directory of this state
            if parent and not _reaches(parent, names):
                continue
            reachable.append((rel, DIR if inode is None else content[inode]))
        return tuple(reachable)


def _reaches(rel: str, names: dict[str, int | None]) -> bool:
    while rel:
        if rel not in names or names[rel] is not None:
            return False
        rel = os.path.dirname(rel)
    return True


def write_state(state: State, root: Path, files_only: bool = False) -> None:
    """Make `root` hold exactly `state`: what is not in it removed, what
    differs written (cheaper than making all 256 run folders again); with
    `files_only`, just its files and the directories they are in."""
    wanted = {rel: content for rel, content in state
              if not (files_only and content is DIR)}
    root.mkdir(mode=0o700, exist_ok=True)
    for path in sorted(root.rglob("*"), reverse=True):  # children before parents
        rel = str(path.relative_to(root))
        is_dir = path.is_dir() and not path.is_symlink()
        if rel in wanted and (wanted[rel] is DIR) == is_dir:
            continue
        if is_dir:
            shutil.rmtree(path)
        else:
            path.unlink()
    for rel, content in sorted(wanted.items()):
        path = root / rel
        if content is DIR:
            path.mkdir(mode=0o700, exist_ok=True)
            continue
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not path.exists() or path.read_bytes() != content:
            path.write_bytes(content)
            os.chmod(path, 0o600)
