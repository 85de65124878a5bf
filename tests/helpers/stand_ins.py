"""Stand-ins for the pool's tests that never start a process: a zygote that
records the fork requests written to its stdin and whether it was killed."""

from __future__ import annotations

from dataclasses import dataclass, field

# Above the kernel's largest pid (4194304): a kill of its group finds no process.
NO_SUCH_PID = 4_194_400
KILLED = 9  # a wait status: killed by SIGKILL


class Pipe:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, data: bytes) -> None:
        self.lines.append(data.decode().strip())

    def flush(self) -> None:
        pass


@dataclass
class StandInZygote:
    pid: int = NO_SUCH_PID
    stdin: Pipe = field(default_factory=Pipe)
    killed: bool = False

    def kill(self) -> None:
        self.killed = True
