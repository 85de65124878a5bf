"""staal.records.appendlog: the fsync'd JSON-lines log under the ledger and journals."""

from __future__ import annotations

import errno
import os
import resource
import signal
import stat
import tempfile
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from staal.errors import CanonicalError, LogDamaged, LogExists, RecordError
from staal.money import Money
from staal.records.appendlog import AppendLog, LogRead, read_log
from staal.records.canonical import canonical_json
from staal.records.fsio import OS_SYNC

BOUND = 10.0  # seconds any wait in these tests may take before it fails


class NullSyncer:
    """Counts syncs and does none, for tests about content rather than durability."""

    def __init__(self) -> None:
        self.files = 0
        self.dirs = 0
        self._lock = threading.Lock()

    def sync_file(self, fd: int) -> None:
        with self._lock:
            self.files += 1

    def sync_dir(self, path: str | os.PathLike[str]) -> None:
        with self._lock:
            self.dirs += 1


class RecordingSyncer:
    """Records every sync together with what the disk held at that moment."""

    def __init__(self, watched: Path) -> None:
        self.watched = watched
        self.calls: list[tuple[str, Any]] = []

    def sync_file(self, fd: int) -> None:
        # The descriptor must be the watched file, and its bytes already written.
        same_file = os.fstat(fd).st_ino == os.stat(self.watched).st_ino
        self.calls.append(("file", same_file, self.watched.read_bytes()))

    def sync_dir(self, path: str | os.PathLike[str]) -> None:
        self.calls.append(("dir", Path(path), sorted(os.listdir(path))))


class FailingSyncer(NullSyncer):
    """Syncs nothing; once armed, every file sync fails as a dying disk would."""

    armed = False

    def sync_file(self, fd: int) -> None:
        if self.armed:
            raise OSError(errno.EIO, "simulated fsync failure")


def line(record: dict[str, Any]) -> bytes:
    return canonical_json(record) + b"\n"


def write_log(path: Path, records: list[dict[str, Any]], tail: bytes = b"") -> bytes:
    data = b"".join(line(r) for r in records) + tail
    path.write_bytes(data)
    return data


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask():
    saved = os.umask(0o077)  # the only way to read the umask is to set one
    os.umask(saved)
    yield os.umask
    os.umask(saved)


EARLIER = [
    {"kind": "header", "run": "a" * 32, "version": 1},
    {"kind": "intent", "op": 1, "args": {"amount": "35.00", "currency": "USD"}},
    {"kind": "outcome", "op": 1, "result": [1, None, True, "ok"]},
]
# Multi-byte UTF-8 and escapes, so some cuts land inside a character or an escape.
LAST = {"kind": "print", "op": 2, "text": "née \u00e9\u4e2d\U0001f600 \"q\" \\ end"}


# Reading


def test_records_appended_are_read_back_in_order(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with AppendLog.create(path, NullSyncer()) as log:
        for record in EARLIER:
            log.append(record)
    read = read_log(path)
    assert read == LogRead(tuple(EARLIER), path.stat().st_size, 0)


def test_an_empty_log_has_no_records(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"")
    assert read_log(path) == LogRead((), 0, 0)


def test_read_log_accepts_a_string_path(tmp_path: Path) -> None:
    path = tmp_path / "log"
    write_log(path, EARLIER)
    assert read_log(str(path)).records == tuple(EARLIER)


def test_a_torn_last_line_is_discarded_at_every_cut_and_earlier_records_kept(
    tmp_path: Path,
) -> None:
    prefix = b"".join(line(r) for r in EARLIER)
    last = line(LAST)
    for cut in range(len(last)):  # from the line's start to just before its newline
        path = tmp_path / f"cut-{cut}" / "log"
        path.parent.mkdir()
        path.write_bytes(prefix + last[:cut])

        read = read_log(path)
        assert read == LogRead(tuple(EARLIER), len(prefix), cut), cut
        assert path.read_bytes() == prefix + last[:cut], "read_log changed the file"

        log, opened = AppendLog.open(path, syncer=NullSyncer())
        with log:
            assert opened == read
            assert path.read_bytes() == prefix, "open did not cut the torn tail"
            log.append({"kind": "end", "cut": cut})
        after = read_log(path)
        assert after.records == (*EARLIER, {"kind": "end", "cut": cut})
        assert after.torn_bytes == 0
        assert after.valid_bytes == path.stat().st_size


@pytest.mark.parametrize(
    "tail",
    [b'{"complete":"json","but":"no newline"}', b"\x00\x00\x00\x00", b"\xff\xfe", b"[1]", b" "],
    ids=["valid-json", "nul-bytes", "invalid-utf8", "not-an-object", "space"],
)
def test_a_last_segment_without_newline_is_torn_whatever_its_content(
    tmp_path: Path, tail: bytes
) -> None:
    path = tmp_path / "log"
    data = write_log(path, EARLIER, tail)
    assert read_log(path) == LogRead(tuple(EARLIER), len(data) - len(tail), len(tail))


def test_a_log_that_is_only_a_torn_line_has_no_records(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b'{"kind":"hea')
    assert read_log(path) == LogRead((), 0, 12)
    log, read = AppendLog.open(path, syncer=NullSyncer())
    log.close()
    assert read.torn_bytes == 12
    assert path.read_bytes() == b""


def _garbage_byte(body: bytes) -> bytes:
    return body[:1] + b"@" + body[1:]


def _truncated(body: bytes) -> bytes:
    return body[: len(body) // 2]


DAMAGE = {
    "garbage-byte": _garbage_byte,
    "not-an-object": lambda body: b"[1]",
    "a-bare-string": lambda body: b'"header"',
    "a-bare-null": lambda body: b"null",
    "empty-line": lambda body: b"",
    "invalid-utf8": lambda body: b'{"text":"\xff\xfe"}',
    "truncated-json": _truncated,
    "two-objects": lambda body: body + body,
    "nul-bytes": lambda body: b"\x00" * len(body),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("damaged_index", range(len(EARLIER) + 1))
@pytest.mark.parametrize("torn_tail", [b"", b'{"kind":"to'], ids=["whole", "torn-tail"])
def test_damage_to_any_complete_line_is_reported_with_its_line_number(
    tmp_path: Path, damage: str, damaged_index: int, torn_tail: bytes
) -> None:
    lines = [line(r) for r in [*EARLIER, LAST]]
    lines[damaged_index] = DAMAGE[damage](lines[damaged_index][:-1]) + b"\n"
    path = tmp_path / "log"
    data = b"".join(lines) + torn_tail
    path.write_bytes(data)

    with pytest.raises(LogDamaged) as caught:
        read_log(path)
    assert caught.value.kind == "log_damaged"
    assert caught.value.line == damaged_index + 1
    assert caught.value.path == str(path)
    assert path.read_bytes() == data

    with pytest.raises(LogDamaged) as caught:
        AppendLog.open(path, syncer=NullSyncer())
    assert caught.value.line == damaged_index + 1
    assert path.read_bytes() == data, "open must not change a damaged log"


def test_a_line_ending_in_a_carriage_return_is_still_one_record(tmp_path: Path) -> None:
    # JSON allows trailing whitespace; the line is intact, so it is not damage.
    path = tmp_path / "log"
    path.write_bytes(b'{"a":1}\r\n')
    assert read_log(path).records == ({"a": 1},)


# The decode hook


def _decode_entry(record: dict[str, Any]) -> tuple[str, Money]:
    if "kind" not in record:
        raise RecordError("missing key", "kind")
    return record["kind"], Money.from_wire(record["amount"])


def test_a_decode_hook_shapes_every_record_read(tmp_path: Path) -> None:
    path = tmp_path / "log"
    write_log(path, [{"kind": "charge", "amount": {"amount": "35", "currency": "USD"}}])
    assert read_log(path, _decode_entry).records == (("charge", Money("35.00", "USD")),)


def test_a_decode_hook_record_error_becomes_damage_naming_that_line(tmp_path: Path) -> None:
    path = tmp_path / "log"
    good = {"kind": "charge", "amount": {"amount": "1", "currency": "USD"}}
    data = write_log(path, [good, good, {"amount": {"amount": "1", "currency": "USD"}}, good])
    with pytest.raises(LogDamaged) as caught:
        read_log(path, _decode_entry)
    assert caught.value.line == 3
    assert isinstance(caught.value.__cause__, RecordError)
    assert caught.value.__cause__.path == "kind"
    with pytest.raises(LogDamaged) as caught:
        AppendLog.open(path, _decode_entry, NullSyncer())
    assert caught.value.line == 3
    assert path.read_bytes() == data


def test_any_staal_error_from_the_decode_hook_becomes_damage(tmp_path: Path) -> None:
    path = tmp_path / "log"
    write_log(path, [{"kind": "charge", "amount": {"amount": "1.234", "currency": "USD"}}])
    with pytest.raises(LogDamaged) as caught:
        read_log(path, _decode_entry)
    assert caught.value.line == 1
    assert caught.value.__cause__.kind == "money"


def test_a_bug_in_the_decode_hook_is_not_disguised_as_damage(tmp_path: Path) -> None:
    path = tmp_path / "log"
    write_log(path, [{"kind": "charge"}])
    with pytest.raises(KeyError):
        read_log(path, _decode_entry)


def test_the_decode_hook_never_sees_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "log"
    write_log(path, [{"n": 1}], b'{"n":2}')
    seen: list[dict[str, Any]] = []
    read = read_log(path, lambda record: seen.append(record) or record["n"])
    assert read.records == (1,)
    assert seen == [{"n": 1}]


# Creating and opening


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o277])
def test_a_new_log_is_0600_and_its_new_directories_0700(
    tmp_path: Path, umask, mask: int
) -> None:
    umask(mask)
    path = tmp_path / "state" / "runs" / "log"
    AppendLog.create(path, NullSyncer()).close()
    assert mode_of(path) == 0o600
    assert mode_of(tmp_path / "state") == 0o700
    assert mode_of(tmp_path / "state" / "runs") == 0o700


def test_create_refuses_an_existing_file_and_leaves_it_alone(tmp_path: Path) -> None:
    path = tmp_path / "log"
    data = write_log(path, EARLIER)
    with pytest.raises(LogExists) as caught:
        AppendLog.create(path, NullSyncer())
    assert caught.value.kind == "log_exists"
    assert path.read_bytes() == data


def test_create_makes_the_file_and_its_directory_entry_durable_before_returning(
    tmp_path: Path,
) -> None:
    path = tmp_path / "new" / "log"
    syncer = RecordingSyncer(path)
    log = AppendLog.create(path, syncer)
    calls_at_return = list(syncer.calls)
    log.close()
    assert calls_at_return == [
        ("dir", tmp_path, ["new"]),
        ("file", True, b""),
        ("dir", tmp_path / "new", ["log"]),
    ]


def test_each_append_syncs_the_file_once_after_its_bytes_are_written(tmp_path: Path) -> None:
    path = tmp_path / "log"
    syncer = RecordingSyncer(path)
    with AppendLog.create(path, syncer) as log:
        syncer.calls.clear()
        expected = b""
        for record in EARLIER:
            log.append(record)
            expected += line(record)
            assert syncer.calls == [("file", True, expected)]
            syncer.calls.clear()


def test_append_returns_only_after_the_sync_has_finished(tmp_path: Path) -> None:
    entered, release = threading.Event(), threading.Event()

    class GatedSyncer(NullSyncer):
        armed = False  # create's own sync is not the one under test

        def sync_file(self, fd: int) -> None:
            if self.armed:
                entered.set()
                assert release.wait(BOUND)

    path = tmp_path / "log"
    syncer = GatedSyncer()
    log = AppendLog.create(path, syncer)
    syncer.armed = True
    returned = threading.Event()
    appender = threading.Thread(target=lambda: (log.append({"n": 1}), returned.set()))
    appender.start()
    try:
        assert entered.wait(BOUND)
        assert not returned.is_set()
    finally:
        release.set()
        appender.join(BOUND)
        log.close()
    assert returned.is_set()


def test_open_cuts_a_torn_tail_and_makes_it_durable_before_returning(tmp_path: Path) -> None:
    path = tmp_path / "log"
    prefix = write_log(path, EARLIER, b'{"kind":"pri')
    prefix = prefix[: -len(b'{"kind":"pri')]
    syncer = RecordingSyncer(path)
    log, read = AppendLog.open(path, syncer=syncer)
    log.close()
    assert read.valid_bytes == len(prefix)
    assert syncer.calls == [("file", True, prefix), ("dir", tmp_path, ["log"])]


def test_open_of_a_missing_log_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        AppendLog.open(tmp_path / "absent" / "log", syncer=NullSyncer())
    assert not (tmp_path / "absent").exists()


def test_open_or_create_creates_a_missing_log_then_reopens_it(tmp_path: Path) -> None:
    path = tmp_path / "new" / "log"
    log, read = AppendLog.open_or_create(path, syncer=NullSyncer())
    with log:
        assert read == LogRead((), 0, 0)
        log.append({"n": 1})
    path.write_bytes(path.read_bytes() + b'{"n":')
    log, read = AppendLog.open_or_create(path, lambda r: r["n"], NullSyncer())
    with log:
        assert read.records == (1,)
        assert read.torn_bytes == len(b'{"n":')
        log.append({"n": 2})
    assert read_log(path).records == ({"n": 1}, {"n": 2})


def test_logs_work_with_the_real_os_sync(tmp_path: Path) -> None:
    path = tmp_path / "real" / "log"
    with AppendLog.create(path, OS_SYNC) as log:
        log.append(EARLIER[0])
    path.write_bytes(path.read_bytes() + b'{"torn')
    log, read = AppendLog.open(path)
    with log:
        assert read.records == (EARLIER[0],)
        log.append(EARLIER[1])
    assert read_log(path).records == tuple(EARLIER[:2])


# Appending


def test_money_and_decimals_are_written_in_their_canonical_form(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with AppendLog.create(path, NullSyncer()) as log:
        log.append({"z": Decimal("1.50"), "charged": Money("35", "USD"), "yen": Money(500, "JPY")})
    assert path.read_bytes() == (
        b'{"charged":{"amount":"35.00","currency":"USD"},'
        b'"yen":{"amount":"500","currency":"JPY"},"z":"1.5"}\n'
    )


def test_a_record_with_no_canonical_form_is_refused_with_nothing_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log"
    with AppendLog.create(path, NullSyncer()) as log:
        log.append({"n": 1})
        with pytest.raises(CanonicalError) as caught:
            log.append({"n": float("nan")})
        assert caught.value.kind == "canonical"
        log.append({"n": 2})
    assert read_log(path).records == ({"n": 1}, {"n": 2})


def test_a_record_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with AppendLog.create(path, NullSyncer()) as log, pytest.raises(TypeError):
        log.append([1, 2])  # type: ignore[arg-type]
    assert path.read_bytes() == b""


def test_appending_after_close_raises_and_close_may_be_repeated(tmp_path: Path) -> None:
    path = tmp_path / "log"
    log = AppendLog.create(path, NullSyncer())
    assert log.path == path
    assert not log.closed
    log.close()
    log.close()
    assert log.closed
    with pytest.raises(ValueError):
        log.append({"n": 1})
    assert path.read_bytes() == b""


def test_leaving_the_with_block_closes_the_log(tmp_path: Path) -> None:
    with AppendLog.create(tmp_path / "log", NullSyncer()) as log:
        pass
    assert log.closed


def test_a_failed_sync_makes_the_log_refuse_further_appends(tmp_path: Path) -> None:
    path = tmp_path / "log"
    syncer = FailingSyncer()
    log = AppendLog.create(path, syncer)
    syncer.armed = True
    with log:
        with pytest.raises(OSError) as first:
            log.append({"n": 1})
        assert first.value.errno == errno.EIO
        with pytest.raises(OSError) as second:
            log.append({"n": 2})
        assert second.value.__cause__ is first.value
    assert read_log(path).records == ({"n": 1},)


def test_a_write_cut_short_by_a_file_size_limit_leaves_a_torn_tail_that_open_repairs(
    tmp_path: Path,
) -> None:
    # A real partial write failure: RLIMIT_FSIZE lets the first write fill the
    # file up to the limit, and the next one fails with EFBIG (SIGXFSZ ignored).
    path = tmp_path / "log"
    log = AppendLog.create(path, NullSyncer())
    log.append({"n": 1})
    limit = path.stat().st_size + 5
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        with pytest.raises(OSError) as caught:
            log.append({"n": 2, "pad": "x" * 100})
        assert caught.value.errno == errno.EFBIG
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert path.stat().st_size == limit
    with pytest.raises(OSError):
        log.append({"n": 3})
    log.close()
    assert path.stat().st_size == limit, "a broken log must not append past a torn line"

    log, read = AppendLog.open(path, syncer=NullSyncer())
    with log:
        assert read.records == ({"n": 1},)
        assert read.torn_bytes == 5
        log.append({"n": 3})
    assert read_log(path).records == ({"n": 1}, {"n": 3})


def test_concurrent_appends_from_eight_threads_keep_every_line_intact(tmp_path: Path) -> None:
    threads, per_thread = 8, 200
    path = tmp_path / "log"
    syncer = NullSyncer()
    log = AppendLog.create(path, syncer)
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def appender(name: int) -> None:
        try:
            start.wait(BOUND)
            for seq in range(per_thread):
                # Records of varying size, some beyond a pipe/page boundary.
                log.append({"thread": name, "seq": seq, "pad": "x" * (seq * 37 % 5000)})
        except BaseException as exc:  # noqa: BLE001 - reported below, not lost in the thread
            errors.append(exc)

    workers = [threading.Thread(target=appender, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(BOUND)
    log.close()
    assert not any(worker.is_alive() for worker in workers)
    assert errors == []

    read = read_log(path)
    assert read.torn_bytes == 0
    assert len(read.records) == threads * per_thread
    assert syncer.files == 1 + threads * per_thread  # one at create, one per append
    for name in range(threads):
        seqs = [r["seq"] for r in read.records if r["thread"] == name]
        assert seqs == list(range(per_thread))


# Properties

_INT64 = 2**63
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-_INT64, max_value=_INT64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
json_records = st.lists(st.dictionaries(st.text(), json_values, max_size=6), max_size=8)

PROPERTY_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY_SETTINGS
@given(records=json_records)
def test_any_json_records_appended_are_read_back_equal(records: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log"
        with AppendLog.create(path, NullSyncer()) as log:
            for record in records:
                log.append(record)
        read = read_log(path)
    assert read.records == tuple(orjson.loads(canonical_json(r)) for r in records)
    assert read.records == tuple(records)
    assert read.torn_bytes == 0


@PROPERTY_SETTINGS
@given(records=json_records, tail=st.binary(max_size=64).filter(lambda b: b"\n" not in b))
def test_any_tail_without_a_newline_is_torn_and_the_rest_kept(
    records: list[dict[str, Any]], tail: bytes
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log"
        body = b"".join(line(r) for r in records)
        path.write_bytes(body + tail)
        assert read_log(path) == LogRead(tuple(records), len(body), len(tail))
        log, _ = AppendLog.open(path, syncer=NullSyncer())
        with log:
            log.append({"after": True})
        assert read_log(path).records == (*records, {"after": True})


def test_an_unsynced_append_is_made_durable_by_the_next_synced_one_or_by_close(tmp_path):
    syncs: list[bytes] = []

    class Recording:
        def sync_file(self, fd: int) -> None:
            syncs.append((tmp_path / "log").read_bytes())

        def sync_dir(self, path) -> None:
            pass

    log = AppendLog.create(tmp_path / "log", syncer=Recording())
    syncs.clear()
    log.append({"n": 1}, sync=False)
    assert syncs == []
    log.append({"n": 2})
    assert syncs == [b'{"n":1}\n{"n":2}\n']
    log.append({"n": 3}, sync=False)
    log.close()
    assert syncs[-1] == b'{"n":1}\n{"n":2}\n{"n":3}\n'
    assert len(syncs) == 2


def test_close_after_only_synced_appends_syncs_nothing_more(tmp_path):
    count = []

    class Counting:
        def sync_file(self, fd: int) -> None:
            count.append(fd)

        def sync_dir(self, path) -> None:
            pass

    log = AppendLog.create(tmp_path / "log", syncer=Counting())
    log.append({"n": 1})
    before = len(count)
    log.close()
    assert len(count) == before


def test_a_log_created_with_its_first_record_holds_it_after_one_file_sync(tmp_path):
    seen: list[bytes] = []

    class Recording:
        def sync_file(self, fd: int) -> None:
            seen.append((tmp_path / "log").read_bytes())

        def sync_dir(self, path) -> None:
            pass

    log = AppendLog.create(tmp_path / "log", syncer=Recording(), first={"n": 1})
    assert seen == [b'{"n":1}\n']
    log.close()
    assert read_log(tmp_path / "log").records == ({"n": 1},)
