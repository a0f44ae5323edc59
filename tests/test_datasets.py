"""The data layer: mirror, cache and download, checksums, atomic downloads, clear errors.

No test touches the network: the module's URL opener is replaced in every test (by default with
one that fails the test if it is called at all).
"""

import gzip
import hashlib
import io
import os
import re
import subprocess
import sys
import urllib.error
from pathlib import Path

import pytest
from needs import missing

from annotated.base import datasets
from annotated.base.datasets import (
    DATA_DIR_ENV,
    MULTI30K_SPLITS,
    ChecksumMismatchError,
    DataUnavailableError,
    multi30k_paths,
    read_multi30k,
    sha256_of,
)

ROOT = Path(__file__).resolve().parent.parent

# Sentences chosen to catch a reader that does more than strip the newline: outer spaces, a tab,
# non-ASCII letters, a no-break space, an empty line, and U+2028, at which str.splitlines() breaks.
GERMAN = ["Ein Hund läuft.", "  Zwei Männer\tam Strand  ", "", "Straße\u00a0und\u2028Weg"]
ENGLISH = ["A dog runs.", "  Two men\ton the beach  ", "", "Street\u00a0and\u2028road"]


def _gzip_lines(lines: list[str]) -> bytes:
    return gzip.compress("".join(line + "\n" for line in lines).encode("utf-8"), mtime=0)


def _files(folder: Path) -> list[str]:
    """Names of the files in a folder; none if it does not exist."""
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


@pytest.fixture(autouse=True)
def isolated(monkeypatch):
    """No mirror from the environment, and no network: calling the opener fails the test. The
    pauses between a download's tries are recorded (`WAITS`), not waited."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)

    def no_network(url, start=0):
        pytest.fail(f"the test tried to download {url}")

    monkeypatch.setattr(datasets, "_open_url", no_network)
    monkeypatch.setattr(datasets, "_wait", WAITS.append)
    WAITS.clear()


WAITS: list[float] = []  # the pauses the download took between tries, in this test


@pytest.fixture
def fake_train(monkeypatch):
    """Bytes of small train.de.gz / train.en.gz, with the checksum table set to their digests."""
    blobs = {"train.de.gz": _gzip_lines(GERMAN), "train.en.gz": _gzip_lines(ENGLISH)}
    table = {name: hashlib.sha256(data).hexdigest() for name, data in blobs.items()}
    monkeypatch.setattr(datasets, "MULTI30K_SHA256", table)
    return blobs


def _write(folder: Path, blobs: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in blobs.items():
        (folder / name).write_bytes(data)
    return folder


def _serve(blobs: dict[str, bytes], calls: list[str]):
    """An opener serving `blobs` by the last part of the URL, recording each URL asked for."""

    def opener(url):
        calls.append(url)
        return io.BytesIO(blobs[url.rsplit("/", 1)[1]])

    return opener


# --- Reading from a mirror -----------------------------------------------------------------------


def test_reads_exact_pairs_from_a_mirror_that_is_the_dataset_folder(tmp_path, fake_train):
    mirror = _write(tmp_path / "mirror", fake_train)
    cache = tmp_path / "cache"
    pairs = read_multi30k("train", mirror=mirror, cache_dir=cache)
    assert pairs == list(zip(GERMAN, ENGLISH, strict=True))
    paths = multi30k_paths("train", mirror=mirror, cache_dir=cache)
    assert paths == {"de": mirror / "train.de.gz", "en": mirror / "train.en.gz"}  # read in place
    assert not cache.exists()  # nothing copied, nothing recorded


def test_a_mirror_may_be_the_parent_of_a_multi30k_folder(tmp_path, fake_train):
    parent = tmp_path / "shared"
    _write(parent / "multi30k", fake_train)
    paths = multi30k_paths("train", mirror=parent, cache_dir=tmp_path / "cache")
    assert paths["de"] == parent / "multi30k" / "train.de.gz"
    assert read_multi30k("train", mirror=parent, cache_dir=tmp_path / "cache")[1] == (
        GERMAN[1],
        ENGLISH[1],
    )


def test_the_environment_variable_names_a_mirror_and_the_argument_wins(
    tmp_path, fake_train, monkeypatch
):
    from_env = _write(tmp_path / "env" / "multi30k", fake_train)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "env"))
    cache = tmp_path / "cache"
    assert multi30k_paths("train", cache_dir=cache)["en"] == from_env / "train.en.gz"
    assert read_multi30k("train", cache_dir=cache) == list(zip(GERMAN, ENGLISH, strict=True))

    from_argument = _write(tmp_path / "argument", fake_train)
    assert multi30k_paths("train", mirror=from_argument, cache_dir=cache)["en"] == (
        from_argument / "train.en.gz"
    )
    # A corrupt file in the variable's mirror does not matter when the argument names another.
    (from_env / "train.en.gz").write_bytes(b"corrupt")
    assert read_multi30k("train", mirror=from_argument, cache_dir=cache)[0] == (
        GERMAN[0],
        ENGLISH[0],
    )
    with pytest.raises(ChecksumMismatchError):
        read_multi30k("train", cache_dir=cache)


def test_a_mirror_that_does_not_exist_is_an_error(tmp_path, fake_train, monkeypatch):
    with pytest.raises(DataUnavailableError, match="not a folder"):
        multi30k_paths("train", mirror=tmp_path / "typo", cache_dir=tmp_path / "cache")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "typo"))
    with pytest.raises(DataUnavailableError, match=DATA_DIR_ENV):
        multi30k_paths("train", cache_dir=tmp_path / "cache")


# --- Checksums -----------------------------------------------------------------------------------


def test_sha256_of_matches_a_known_digest(tmp_path):
    (tmp_path / "abc").write_bytes(b"abc")
    # The FIPS 180-2 test vector for "abc".
    assert sha256_of(tmp_path / "abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


def test_a_mirror_file_with_the_wrong_checksum_is_refused(tmp_path, fake_train):
    mirror = _write(tmp_path / "mirror", fake_train)
    tampered = _gzip_lines(GERMAN[:-1] + ["changed"])
    (mirror / "train.de.gz").write_bytes(tampered)
    with pytest.raises(ChecksumMismatchError) as caught:
        read_multi30k("train", mirror=mirror, cache_dir=tmp_path / "cache")
    message = str(caught.value)
    assert "train.de.gz" in message and str(mirror) in message
    assert datasets.MULTI30K_SHA256["train.de.gz"] in message  # expected
    assert hashlib.sha256(tampered).hexdigest() in message  # actual
    assert "mirror" in message


def test_a_cached_file_with_the_wrong_checksum_is_refused_not_used(tmp_path, fake_train):
    cache = tmp_path / "cache"
    _write(cache / "multi30k", fake_train)
    assert read_multi30k("train", cache_dir=cache, download=False)[0] == (GERMAN[0], ENGLISH[0])
    (cache / "multi30k" / "train.en.gz").write_bytes(b"not the file")
    with pytest.raises(ChecksumMismatchError) as caught:
        read_multi30k("train", cache_dir=cache)
    message = str(caught.value)
    assert "train.en.gz" in message
    assert datasets.MULTI30K_SHA256["train.en.gz"] in message
    assert hashlib.sha256(b"not the file").hexdigest() in message
    assert f"Delete {cache / 'multi30k' / 'train.en.gz'}" in message


# --- Missing files -------------------------------------------------------------------------------


def test_offline_with_nothing_available_gives_one_error_naming_every_file_and_both_options(
    tmp_path, fake_train, monkeypatch
):
    calls = []

    def offline(url):
        calls.append(url)
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(datasets, "_open_url", offline)
    cache = tmp_path / "cache"
    with pytest.raises(DataUnavailableError) as caught:
        read_multi30k("train", mirror=_write(tmp_path / "empty-mirror", {}), cache_dir=cache)
    message = str(caught.value)
    for name in ("train.de.gz", "train.en.gz"):
        assert name in message and datasets.MULTI30K_URL + name in message
    assert "mirror=" in message and DATA_DIR_ENV in message
    assert str(cache / "multi30k") in message
    assert "name resolution" in message
    # The first file is tried again, with doubling pauses; after that the second is not tried.
    assert calls == [datasets.MULTI30K_URL + "train.de.gz"] * datasets.DOWNLOAD_TRIES
    assert len(WAITS) == datasets.DOWNLOAD_TRIES - 1
    assert _files(cache / "multi30k") == []


def test_download_false_never_opens_a_url_and_says_why(tmp_path, fake_train):
    with pytest.raises(DataUnavailableError) as caught:
        multi30k_paths("train", cache_dir=tmp_path / "cache", download=False)
    message = str(caught.value)
    assert "train.de.gz" in message and "train.en.gz" in message and "download=False" in message
    assert not (tmp_path / "cache").exists()


def test_a_file_found_in_the_mirror_and_one_missing_reports_only_the_missing_one(
    tmp_path, fake_train
):
    mirror = _write(tmp_path / "mirror", {"train.de.gz": fake_train["train.de.gz"]})
    with pytest.raises(DataUnavailableError) as caught:
        multi30k_paths("train", mirror=mirror, cache_dir=tmp_path / "cache", download=False)
    message = str(caught.value)
    assert "train.en.gz" in message and "train.de.gz" not in message


# --- Downloads -----------------------------------------------------------------------------------


def test_a_download_lands_in_the_cache_verified_and_is_reused(tmp_path, fake_train, monkeypatch):
    calls = []
    monkeypatch.setattr(datasets, "_open_url", _serve(fake_train, calls))
    cache = tmp_path / "cache"
    paths = multi30k_paths("train", cache_dir=cache)
    folder = cache / "multi30k"
    assert paths == {"de": folder / "train.de.gz", "en": folder / "train.en.gz"}
    assert calls == [datasets.MULTI30K_URL + "train.de.gz", datasets.MULTI30K_URL + "train.en.gz"]
    assert calls[0] == (
        "https://raw.githubusercontent.com/multi30k/dataset/"
        "c40b37b23d6387214f8ab37335b5a8672b9745f2/data/task1/raw/train.de.gz"
    )
    assert _files(folder) == ["train.de.gz", "train.en.gz"]  # no temporary file left
    assert paths["de"].read_bytes() == fake_train["train.de.gz"]

    calls.clear()
    assert read_multi30k("train", cache_dir=cache) == list(zip(GERMAN, ENGLISH, strict=True))
    assert calls == []  # the second time it comes from the cache


class _BreaksHalfway:
    """A response that delivers some bytes, then fails the way a dropped connection does."""

    def __init__(self, data: bytes, error: BaseException):
        self.data, self.error, self.reads = data, error, 0

    def read(self, size=-1):
        self.reads += 1
        if self.reads == 1:
            return self.data[: len(self.data) // 2]
        raise self.error

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize(
    "error", [ConnectionResetError("connection reset by peer"), KeyboardInterrupt()]
)
def test_a_download_failing_halfway_leaves_no_file_behind(tmp_path, fake_train, monkeypatch, error):
    responses = []

    def opener(url):
        responses.append(_BreaksHalfway(fake_train[url.rsplit("/", 1)[1]], error))
        return responses[-1]

    monkeypatch.setattr(datasets, "_open_url", opener)
    cache = tmp_path / "cache"
    with pytest.raises(
        type(error) if isinstance(error, KeyboardInterrupt) else DataUnavailableError
    ):
        multi30k_paths("train", cache_dir=cache)
    assert responses and responses[0].reads == 2  # some bytes were written before the failure
    assert _files(cache / "multi30k") == []  # neither the final name nor the temporary file


def test_a_download_with_the_wrong_bytes_is_rejected_and_discarded(
    tmp_path, fake_train, monkeypatch
):
    served = dict(fake_train, **{"train.de.gz": _gzip_lines(["something else"])})
    monkeypatch.setattr(datasets, "_open_url", _serve(served, []))
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumMismatchError) as caught:
        multi30k_paths("train", cache_dir=cache)
    message = str(caught.value)
    assert datasets.MULTI30K_URL + "train.de.gz" in message
    assert datasets.MULTI30K_SHA256["train.de.gz"] in message
    assert hashlib.sha256(served["train.de.gz"]).hexdigest() in message
    assert _files(cache / "multi30k") == []


def test_a_short_download_is_caught_by_its_announced_length(tmp_path, fake_train, monkeypatch):
    class Short(io.BytesIO):
        headers = {"Content-Length": "999999"}

    monkeypatch.setattr(datasets, "_open_url", lambda url: Short(b"truncated"))
    # With no published checksum, only the length can tell that the transfer was cut short.
    monkeypatch.setattr(datasets, "MULTI30K_SHA256", {})
    cache = tmp_path / "cache"
    with pytest.raises(DataUnavailableError, match="999999 announced"):
        multi30k_paths("train", cache_dir=cache)
    assert _files(cache / "multi30k") == []


def test_files_without_a_published_checksum_are_trusted_on_first_use(tmp_path, monkeypatch):
    blobs = {
        "test_2017_mscoco.de.gz": _gzip_lines(["Ein Bus."]),
        "test_2017_mscoco.en.gz": _gzip_lines(["A bus."]),
    }
    assert "test_2017_mscoco.de.gz" not in datasets.MULTI30K_SHA256
    calls = []
    monkeypatch.setattr(datasets, "_open_url", _serve(blobs, calls))
    cache = tmp_path / "cache"
    assert read_multi30k("test_2017_mscoco", cache_dir=cache) == [("Ein Bus.", "A bus.")]
    sums = (cache / "multi30k" / "SHA256SUMS.local").read_text()
    for name, data in blobs.items():
        assert f"{hashlib.sha256(data).hexdigest()}  {name}\n" in sums

    # A later change to the cached copy is caught against the record.
    changed = _gzip_lines(["Ein Zug."])
    (cache / "multi30k" / "test_2017_mscoco.de.gz").write_bytes(changed)
    with pytest.raises(ChecksumMismatchError) as caught:
        read_multi30k("test_2017_mscoco", cache_dir=cache)
    assert hashlib.sha256(blobs["test_2017_mscoco.de.gz"]).hexdigest() in str(caught.value)
    assert hashlib.sha256(changed).hexdigest() in str(caught.value)
    assert "SHA256SUMS.local" in str(caught.value)
    # ... and so is a mirror holding another version.
    mirror = _write(tmp_path / "mirror", dict(blobs, **{"test_2017_mscoco.de.gz": changed}))
    with pytest.raises(ChecksumMismatchError):
        read_multi30k("test_2017_mscoco", mirror=mirror, cache_dir=cache)
    assert len(calls) == 2


def test_a_mirror_file_without_a_published_checksum_is_recorded_on_first_use(tmp_path):
    blobs = {
        "test_2018_flickr.de.gz": _gzip_lines(["Ein Boot."]),
        "test_2018_flickr.en.gz": _gzip_lines(["A boat."]),
    }
    mirror = _write(tmp_path / "mirror", blobs)
    cache = tmp_path / "cache"
    assert read_multi30k("test_2018_flickr", mirror=mirror, cache_dir=cache) == [
        ("Ein Boot.", "A boat.")
    ]
    assert _files(cache / "multi30k") == ["SHA256SUMS.local"]  # the record, not a copy
    (mirror / "test_2018_flickr.en.gz").write_bytes(_gzip_lines(["A ship."]))
    with pytest.raises(ChecksumMismatchError, match="test_2018_flickr.en.gz"):
        read_multi30k("test_2018_flickr", mirror=mirror, cache_dir=cache)


# --- Reading -------------------------------------------------------------------------------------


def test_files_with_different_line_counts_are_refused(tmp_path, monkeypatch):
    blobs = {"val.de.gz": _gzip_lines(GERMAN), "val.en.gz": _gzip_lines(ENGLISH[:-1])}
    table = {name: hashlib.sha256(data).hexdigest() for name, data in blobs.items()}
    monkeypatch.setattr(datasets, "MULTI30K_SHA256", table)
    mirror = _write(tmp_path / "mirror", blobs)
    with pytest.raises(ValueError, match="not aligned") as caught:
        read_multi30k("val", mirror=mirror, cache_dir=tmp_path / "cache")
    message = str(caught.value)
    assert str(mirror / "val.de.gz") in message and str(mirror / "val.en.gz") in message
    assert f"has {len(GERMAN)} lines" in message and f"has {len(ENGLISH) - 1}" in message


def test_an_unknown_split_lists_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match="unknown Multi30k split 'validation'") as caught:
        read_multi30k("validation", cache_dir=tmp_path / "cache")
    for split in MULTI30K_SPLITS:
        assert split in str(caught.value)
    assert not (tmp_path / "cache").exists()


def test_the_splits_are_the_upstream_task1_files():
    assert MULTI30K_SPLITS == (
        "train",
        "val",
        "test_2016_flickr",
        "test_2017_flickr",
        "test_2017_mscoco",
        "test_2018_flickr",
    )
    assert set(datasets.MULTI30K_SHA256) == {
        f"{split}.{language}.gz"
        for split in ("train", "val", "test_2016_flickr")
        for language in ("de", "en")
    }


def test_importing_prints_downloads_and_creates_nothing(tmp_path):
    # Any connection attempt during the import fails it.
    code = (
        "import socket\n"
        "def refuse(*args):\n"
        "    raise AssertionError('the import tried to connect')\n"
        "socket.socket.connect = refuse\n"
        "import annotated.base.datasets\n"
    )
    env = {k: v for k, v in os.environ.items() if k != DATA_DIR_ENV}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""
    assert list(tmp_path.iterdir()) == []


# --- The real files, when a local copy is at hand ------------------------------------------------


def _shared_multi30k() -> Path | None:
    base = Path(os.environ.get(DATA_DIR_ENV) or ROOT.parent / "shared" / "data")
    for folder in (base / "multi30k", base):
        if (folder / "train.de.gz").is_file():
            return folder
    return None


SHARED = _shared_multi30k()


@pytest.fixture
def shared_copy() -> Path:
    """The local Multi30k folder; without one the test is skipped (or fails: tests/needs.py)."""
    if SHARED is None:
        missing(f"no local Multi30k copy: set {DATA_DIR_ENV} or put it in ../shared/data/multi30k")
    return SHARED


needs_shared = pytest.mark.usefixtures("shared_copy")


@needs_shared
def test_the_checksum_constants_are_the_published_ones():
    readme = SHARED.parent / "README.md"
    if not readme.is_file():
        pytest.skip(f"no {readme} listing the published checksums")
    published = dict(
        (name, digest)
        for digest, name in re.findall(r"([0-9a-f]{64})\s+multi30k/(\S+)", readme.read_text())
    )
    assert published == datasets.MULTI30K_SHA256


@needs_shared
@pytest.mark.parametrize("split", ["train", "val", "test_2016_flickr"])
def test_the_real_files_verify_and_have_the_published_sizes(split, tmp_path):
    cache = tmp_path / "cache"
    paths = multi30k_paths(split, mirror=SHARED, cache_dir=cache, download=False)
    for path in paths.values():
        assert path.parent == SHARED  # read in place
        assert sha256_of(path) == datasets.MULTI30K_SHA256[path.name]
    pairs = read_multi30k(split, mirror=SHARED, cache_dir=cache, download=False)
    published = {"train": 29000, "val": 1014, "test_2016_flickr": 1000}  # the README's counts
    assert len(pairs) == datasets.MULTI30K_PAIRS[split] == published[split]
    assert all(german and english for german, english in pairs)
    if split == "train":
        assert pairs[0][0].startswith("Zwei junge weiße Männer")
        assert pairs[0][1] == "Two young, White males are outside near many bushes."
    assert not cache.exists()


# --- WMT14 -------------------------------------------------------------------------------------


def test_the_wmt14_sample_ships_with_the_book_and_needs_no_mirror_or_network(tmp_path):
    # The real files, from the book's own data/ (no mirror: the fixture unsets it; no network).
    own = datasets.shipped_data_dir() / datasets.WMT14_TOY
    for split, count in datasets.WMT14_TOY_PAIRS.items():
        paths = datasets.wmt14_paths(split, "toy", cache_dir=tmp_path / "cache")
        assert {language: path.parent for language, path in paths.items()} == {"en": own, "de": own}
        pairs = datasets.read_wmt14(split, "toy", cache_dir=tmp_path / "cache")
        assert len(pairs) == count and all(en and de for en, de in pairs)
    assert not (tmp_path / "cache").exists(), "nothing is copied or recorded"
    # The digests the loader checks are the files' own, and data/'s README lists the same ones.
    readme = (own / "README.md").read_text(encoding="utf-8")
    for name, digest in datasets.WMT14_TOY_SHA256.items():
        assert datasets.sha256_of(own / name) == digest
        assert f"{digest}  {name}" in readme
    with pytest.raises(ValueError, match="unknown WMT14 split"):
        datasets.read_wmt14("dev", "toy")
    with pytest.raises(ValueError, match="variant"):
        datasets.read_wmt14("train", "medium")


def test_a_damaged_copy_of_the_books_own_data_is_refused_with_what_to_do(tmp_path, monkeypatch):
    english, german = ["A b ."], ["E f ."]
    blobs = {"val.en.gz": _gzip_lines(english), "val.de.gz": _gzip_lines(german)}
    sums = {name: hashlib.sha256(data).hexdigest() for name, data in blobs.items()}
    monkeypatch.setattr(datasets, "WMT14_TOY_SHA256", sums)
    monkeypatch.setattr(datasets, "shipped_data_dir", lambda: tmp_path / "book")
    own = _write(tmp_path / "book" / "wmt14-toy-ende", blobs)
    assert datasets.read_wmt14("val", "toy", cache_dir=tmp_path / "c") == [("A b .", "E f .")]
    (own / "val.de.gz").write_bytes(_gzip_lines(["E f !"]))
    with pytest.raises(ChecksumMismatchError) as error:
        datasets.read_wmt14("val", "toy", cache_dir=tmp_path / "c")
    assert "book's own copy" in str(error.value) and "git checkout" in str(error.value)


def test_without_the_books_copy_the_sample_says_how_to_restore_it(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "shipped_data_dir", lambda: tmp_path / "book")
    with pytest.raises(DataUnavailableError) as error:
        datasets.read_wmt14("train", "toy", cache_dir=tmp_path / "cache")
    message = str(error.value)
    assert "train.en.gz" in message and "train.de.gz" in message
    assert "the book ships it" in message and "reinstall the book" in message
    assert DATA_DIR_ENV in message  # a mirror can still stand in


def test_without_the_books_copy_the_sample_is_read_from_a_mirror_and_checked(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "shipped_data_dir", lambda: tmp_path / "book")
    english, german = ["A b .", "C &apos;d ."], ["E f .", "G h ."]
    blobs = {"val.en.gz": _gzip_lines(english), "val.de.gz": _gzip_lines(german)}
    sums = {name: hashlib.sha256(data).hexdigest() for name, data in blobs.items()}
    monkeypatch.setattr(datasets, "WMT14_TOY_SHA256", sums)
    mirror = _write(tmp_path / "shared" / "wmt14-toy-ende", blobs)
    pairs = datasets.read_wmt14("val", "toy", mirror=tmp_path / "shared", cache_dir=tmp_path / "c")
    assert pairs == list(zip(english, german, strict=True))
    (mirror / "val.de.gz").write_bytes(_gzip_lines(german + ["extra"]))
    with pytest.raises(ChecksumMismatchError):
        datasets.read_wmt14("val", "toy", mirror=mirror, cache_dir=tmp_path / "c")


class _Ranged(io.BytesIO):
    """A response to a range request: HTTP 206 and the bytes from `start` on."""

    status = 206


def test_a_resumable_download_continues_from_its_part_file(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "DOWNLOAD_TRIES", 1)  # the next run resumes, not the next try
    data = bytes(range(256)) * 400
    calls = []

    def opener(url, start=0):
        calls.append(start)
        if len(calls) == 1:  # the first attempt breaks off after 10,000 bytes

            class Broken(io.BytesIO):
                def read(self, size=-1):
                    chunk = super().read(size)
                    if not chunk:
                        raise ConnectionResetError("connection reset")
                    return chunk

            return Broken(data[:10_000])
        return _Ranged(data[start:])

    monkeypatch.setattr(datasets, "_open_url", opener)
    file = datasets.RemoteFile("big.tgz", "https://example.org/big.tgz", resumable=True)
    cache = tmp_path / "cache"
    with pytest.raises(DataUnavailableError, match="connection reset"):
        datasets.verified_files("archives", [file], cache_dir=cache)
    assert _files(cache / "archives") == ["big.tgz.part"]
    assert (cache / "archives" / "big.tgz.part").stat().st_size == 10_000
    paths = datasets.verified_files("archives", [file], cache_dir=cache)
    assert calls == [0, 10_000], "the second attempt must ask only for the rest"
    assert paths["big.tgz"].read_bytes() == data
    assert _files(cache / "archives") == ["SHA256SUMS.local", "big.tgz"]


def test_a_resumed_download_with_the_wrong_bytes_is_discarded(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "_open_url", lambda url, start=0: _Ranged(b"new bytes"[start:]))
    file = datasets.RemoteFile("a.tgz", "https://example.org/a.tgz", "0" * 64, resumable=True)
    with pytest.raises(ChecksumMismatchError, match="wrong sha256"):
        datasets.verified_files("archives", [file], cache_dir=tmp_path)
    assert _files(tmp_path / "archives") == []


def _tgz(members: dict[str, str]) -> bytes:
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in members.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_prepare_wmt14_extracts_the_three_splits_from_the_statmt_archives(tmp_path, monkeypatch):
    members = {}
    for archive, english, german in [
        c for corpora in datasets.WMT14_MEMBERS.values() for c in corpora
    ]:
        stem = Path(english).name
        if english.endswith(".sgm"):
            en = '<srcset>\n<doc>\n<seg id="1">Hello & world</seg>\n<seg id="2">Bye</seg>\n</doc>\n'
            de = (
                '<refset>\n<doc>\n<seg id="1">Hallo Welt</seg>\n<seg id="2">Tschüss</seg>\n</doc>\n'
            )
        else:
            en, de = f"{stem} one\n{stem} two\n", f"{stem} eins\n{stem} zwei\n"
        members.setdefault(archive, {}).update({english: en, german: de})
    blobs = {name: _tgz(files) for name, files in members.items()}
    calls = []

    def opener(url, start=0):
        calls.append(url)
        return io.BytesIO(blobs[url.rsplit("/", 1)[1]])

    monkeypatch.setattr(datasets, "_open_url", opener)
    cache = tmp_path / "cache"
    train = datasets.read_wmt14("train", "full", cache_dir=cache)
    assert len(train) == 6 and train[0] == ("europarl-v7.de-en.en one", "europarl-v7.de-en.en eins")
    assert train[-1] == ("news-commentary-v9.de-en.en two", "news-commentary-v9.de-en.en zwei")
    assert datasets.read_wmt14("test", "full", cache_dir=cache) == [
        ("Hello & world", "Hallo Welt"),
        ("Bye", "Tschüss"),
    ]
    assert len(calls) == len(datasets.WMT14_ARCHIVES)
    datasets.read_wmt14("val", "full", cache_dir=cache)
    assert len(calls) == len(datasets.WMT14_ARCHIVES), "prepared files are reused"


def test_prepare_wmt14_refuses_an_archive_without_the_expected_files(tmp_path, monkeypatch):
    blobs = {name: _tgz({"README": "nothing here"}) for name in datasets.WMT14_ARCHIVES}
    monkeypatch.setattr(
        datasets, "_open_url", lambda url, start=0: io.BytesIO(blobs[url.rsplit("/", 1)[1]])
    )
    with pytest.raises(ValueError, match="not the WMT14 archive"):
        datasets.prepare_wmt14(cache_dir=tmp_path)


def test_available_offline_looks_in_the_mirror_and_the_cache_only(tmp_path, monkeypatch):
    assert not datasets.available_offline("multi30k", "train.de.gz", cache_dir=tmp_path / "cache")
    _write(tmp_path / "cache" / "multi30k", {"train.de.gz": b"x"})
    assert datasets.available_offline("multi30k", "train.de.gz", cache_dir=tmp_path / "cache")
    _write(tmp_path / "shared" / "wmt14-toy-ende", {"val.en.gz": b"x"})
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "shared"))
    assert datasets.available_offline("wmt14-toy-ende", "val.en.gz", cache_dir=tmp_path / "none")
    assert not datasets.available_offline(
        "wmt14-toy-ende", "val.de.gz", cache_dir=tmp_path / "none"
    )


def test_a_truncated_or_non_gzip_data_file_says_to_delete_it(tmp_path):
    whole = _gzip_lines(["ein Satz", "noch einer"])
    for name, blob in (("cut.gz", whole[: len(whole) // 2]), ("plain.gz", b"ein Satz\n")):
        path = tmp_path / name
        path.write_bytes(blob)
        with pytest.raises(ValueError, match=r"not a complete gzip file.*delete it"):
            datasets._read_lines(path)


def test_invalid_utf8_in_a_wmt14_archive_costs_only_its_own_bytes(tmp_path, capsys):
    import tarfile

    data = b"good one\n" + b"bad \xff\xfe byte\n" + b"gut zwei\n"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("corpus.en")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    with tarfile.open(fileobj=buffer, mode="r:gz") as archive:
        lines = datasets._member_lines(archive, "corpus.en", tmp_path / "x.tgz")
    assert lines == ["good one", "bad \ufffd\ufffd byte", "gut zwei"]
    assert "1 lines were not valid UTF-8" in capsys.readouterr().err


# --- A class's shared folder ---------------------------------------------------------------------


@pytest.fixture
def fake_book_splits(monkeypatch):
    """Small files for the three splits the chapters read, with the checksums set to theirs."""
    blobs = {
        f"{split}.{language}.gz": _gzip_lines(GERMAN if language == "de" else ENGLISH)
        for split in datasets.BOOK_MULTI30K_SPLITS
        for language in ("de", "en")
    }
    table = {name: hashlib.sha256(data).hexdigest() for name, data in blobs.items()}
    monkeypatch.setattr(datasets, "MULTI30K_SHA256", table)
    return blobs


def test_a_teacher_prepares_one_folder_every_student_reads(tmp_path, fake_book_splits, capsys):
    mirror = _write(tmp_path / "teacher-copy", fake_book_splits)
    shared = tmp_path / "class-data"
    old = os.umask(0o077)  # a careful teacher's umask: new files private
    try:
        assert datasets.main([str(shared), "--from", str(mirror), "--no-download"]) == 0
    finally:
        os.umask(old)
    out = capsys.readouterr().out
    assert "6 checked files" in out and f"export {DATA_DIR_ENV}={shared}" in out
    assert _files(shared / "multi30k") == sorted(fake_book_splits)
    for path in [shared, shared / "multi30k", *(shared / "multi30k").iterdir()]:
        assert path.stat().st_mode & 0o777 == (0o755 if path.is_dir() else 0o644), path
    before = {p: p.stat().st_mtime_ns for p in shared.rglob("*")}
    # A student: the shared folder as the mirror, an empty cache of their own.
    student = tmp_path / "student-cache"
    for split in datasets.BOOK_MULTI30K_SPLITS:
        assert read_multi30k(split, mirror=shared, cache_dir=student) == list(
            zip(GERMAN, ENGLISH, strict=True)
        )
    assert {p: p.stat().st_mtime_ns for p in shared.rglob("*")} == before  # nothing written there
    assert _files(student / "multi30k") == []  # and nothing copied: read where it is
    # Preparing again finds every file in place and changes nothing.
    assert datasets.main([str(shared), "--no-download"]) == 0
    assert {p: p.stat().st_mtime_ns for p in shared.rglob("*")} == before


def test_preparing_without_the_files_says_what_is_missing(tmp_path, fake_book_splits, capsys):
    assert datasets.main([str(tmp_path / "class-data"), "--no-download"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("datasets: 2 multi30k file(s) are not available") and "train.de.gz" in err
    with pytest.raises(ValueError, match="unknown data sets.*multi30k, wmt14-toy, wmt14"):
        datasets.prepare_class_folder(tmp_path, ["wmt15"])


def test_a_failed_connection_is_tried_again_with_doubling_pauses_and_resumes(tmp_path, monkeypatch):
    data = bytes(range(256)) * 400
    calls = []

    def opener(url, start=0):
        calls.append(start)
        if len(calls) == 1:
            raise urllib.error.URLError("[Errno 104] Connection reset by peer")
        if len(calls) == 2:  # breaks off after 10,000 bytes

            class Broken(io.BytesIO):
                def read(self, size=-1):
                    chunk = super().read(size)
                    if not chunk:
                        raise ConnectionResetError("connection reset")
                    return chunk

            return Broken(data[:10_000])
        return _Ranged(data[start:])

    monkeypatch.setattr(datasets, "_open_url", opener)
    file = datasets.RemoteFile("big.tgz", "https://example.org/big.tgz", resumable=True)
    paths = datasets.verified_files("archives", [file], cache_dir=tmp_path / "cache")
    assert paths["big.tgz"].read_bytes() == data
    assert calls == [0, 0, 10_000], "the third try asks only for the rest"
    assert WAITS == [datasets.DOWNLOAD_BACKOFF, 2 * datasets.DOWNLOAD_BACKOFF]


@pytest.mark.parametrize("code, refused", [(404, True), (503, False)])
def test_a_server_error_is_tried_again_and_a_refusal_is_not(tmp_path, monkeypatch, code, refused):
    calls = []

    def opener(url):
        calls.append(url)
        raise urllib.error.HTTPError(url, code, "the server's answer", {}, None)

    monkeypatch.setattr(datasets, "_open_url", opener)
    file = datasets.RemoteFile("a.gz", "https://example.org/a.gz")
    with pytest.raises(DataUnavailableError, match=f"HTTP {code}"):
        datasets.verified_files("set", [file], cache_dir=tmp_path / "cache")
    tries = 1 if refused else datasets.DOWNLOAD_TRIES
    assert len(calls) == tries and len(WAITS) == tries - 1


def test_multi30k_is_downloaded_from_one_commit_not_a_branch():
    pinned = re.fullmatch(
        r"https://raw\.githubusercontent\.com/multi30k/dataset/([0-9a-f]{40})/data/task1/raw/",
        datasets.MULTI30K_URL,
    )
    assert pinned, f"{datasets.MULTI30K_URL}: a branch's head can change under the checksums"
