"""Data sets for the book: checked files from a local mirror, the download cache, or the web.

Each file a chapter needs is looked for in three places, in this order (four for the book's own
data, below):

1. **A local mirror**: a folder given as `mirror=` or, when that is not given, by the environment
   variable `ANNOTATED_DATA_DIR`. The folder may hold the files itself, or a subfolder named after
   the data set (`multi30k/`) that holds them, so CI can point the variable at its shared data
   folder and a user straight at a folder of Multi30k files. Files found there are checked and
   read where they are; nothing is copied.
2. **The download cache**: `<cache_dir>/<data set>/`, by default the repository's `data/` folder,
   which git ignores.
3. **The file's public URL**, downloaded into the cache: the bytes go to a temporary file beside
   the final one, are checked, and only then renamed into place, so an interrupted or failed
   download never leaves a partial file under the real name.

The **book's own data**, chapter 8's WMT 2014 sample (`wmt14-toy-ende`), has no public home, so
it ships with the book: in the checkout's `data/wmt14-toy-ende/` (committed, unlike the rest of
`data/`) and in the wheel as package data (`annotated/data/wmt14-toy-ende/`). Those files are looked
for first; a mirror or the cache can still provide them if the book's copy is missing.

Every file is checked against its sha256 before use. Files whose checksum the book records (a
constant here: the data sets' own homes publish none) are checked against that. For the others,
the check is *trust on first use*: the digest of the first copy seen (downloaded or found in the
mirror) is recorded in `<cache_dir>/<data set>/SHA256SUMS.local`, and every later use is checked
against that record.

A data set is described by a table of `RemoteFile`s (name, URL, checksum) and fetched with
`verified_files`; Multi30k below is such a table plus a reader. Importing this module reads,
writes, downloads and prints nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import re
import shutil
import stat
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from annotated.base.files import REPO_ROOT, atomic_write, in_checkout, user_folder

DATA_DIR_ENV = "ANNOTATED_DATA_DIR"
DOWNLOAD_TIMEOUT = 60.0  # seconds a connection may stay silent before the download gives up
DOWNLOAD_TRIES = 5  # tries of one file while the connection fails or the server errs (5xx)
DOWNLOAD_BACKOFF = 2.0  # seconds before the second try, doubled before each one after
LOCAL_SUMS_NAME = "SHA256SUMS.local"
_CHUNK = 1 << 16


class DataUnavailableError(FileNotFoundError):
    """Some data files are in no mirror, not in the cache, and could not be downloaded."""


class ChecksumMismatchError(ValueError):
    """A data file's bytes are not the ones expected: its sha256 differs."""


@dataclass(frozen=True)
class RemoteFile:
    """One file of a data set: its name, its public URL and its sha256 (None: trust on first use).

    A file with no URL is not published anywhere: only the book's own copy (`shipped`), a mirror
    or the cache can provide it. A `shipped` file comes with the book (`shipped_data_dir`). A
    resumable file (a large archive) is downloaded into `<name>.part`, which survives a failed
    download so that the next attempt asks the server for the rest only.
    """

    name: str
    url: str | None
    sha256: str | None = None
    resumable: bool = False
    shipped: bool = False


def shipped_data_dir() -> Path:
    """The folder of the data sets that ship with the book: the package's data/ in an installed
    wheel, else the checkout's data/ (where git keeps only those files)."""
    packaged = Path(__file__).resolve().parents[1] / "data"
    return packaged if packaged.is_dir() else REPO_ROOT / "data"


def default_cache_dir() -> Path:
    """The checkout's data/ folder (git-ignored), or the user's cache folder for an installed book
    (~/.cache/annotated on Linux: `files.user_folder`), never a folder inside the installation."""
    return REPO_ROOT / "data" if in_checkout() else user_folder("cache")


def sha256_of(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's bytes, as 64 lowercase hex digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _open_url(url: str, start: int = 0) -> BinaryIO:
    # The one place that touches the network; tests replace it. `start` > 0 asks for the bytes
    # from there on (an HTTP range request); a server that ignores it answers 200, not 206.
    headers = {"User-Agent": "annotated-transformer-book"}
    if start:
        headers["Range"] = f"bytes={start}-"
    request = urllib.request.Request(url, headers=headers)
    return urllib.request.urlopen(request, timeout=DOWNLOAD_TIMEOUT)


def _wait(seconds: float) -> None:
    # The pause between two tries of a download; tests replace it.
    time.sleep(seconds)


def _fetch_with_retries(file: RemoteFile, target: Path, expected: str | None, origin: str) -> str:
    """Download `file` (resuming it if it is resumable), trying again after a failed connection
    or a server error, with a doubling pause, DOWNLOAD_TRIES times in all. An answer such as 404,
    or the wrong bytes, is final: asking again would not change it."""
    fetch = _download_resumable if file.resumable else _download
    pause = DOWNLOAD_BACKOFF
    for attempt in range(1, DOWNLOAD_TRIES + 1):
        try:
            return fetch(file, target, expected, origin)
        except urllib.error.HTTPError as error:
            if error.code < 500 or attempt == DOWNLOAD_TRIES:
                raise
        except (OSError, http.client.HTTPException):
            if attempt == DOWNLOAD_TRIES:
                raise
        _wait(pause)
        pause *= 2
    raise AssertionError("unreachable: the last try returns or raises")


# --- Where the files may be ----------------------------------------------------------------------


def _mirror_folder(mirror: str | os.PathLike[str] | None) -> tuple[Path | None, str]:
    """The mirror folder to search, and how it was given (for messages)."""
    if mirror is not None:
        folder, given_by = Path(mirror), "the mirror= argument"
    elif os.environ.get(DATA_DIR_ENV):
        folder, given_by = Path(os.environ[DATA_DIR_ENV]), f"the {DATA_DIR_ENV} variable"
    else:
        return None, ""
    if not folder.is_dir():
        # A mirror that does not exist is a typo, not a reason to go to the network.
        raise DataUnavailableError(
            f"the data mirror {folder} (from {given_by}) is not a folder: fix the path, or "
            f"drop it ({'remove the argument' if mirror is not None else f'unset {DATA_DIR_ENV}'}) "
            "to use the download cache"
        )
    return folder, given_by


def _in_mirror(folder: Path, name: str, dataset: str) -> Path | None:
    # The mirror may be a parent holding <dataset>/, or the data set's folder itself.
    for candidate in (folder / dataset / name, folder / name):
        if candidate.is_file():
            return candidate
    return None


# --- Trust on first use --------------------------------------------------------------------------


def _read_local_sums(path: Path) -> dict[str, str]:
    """name -> sha256 from a sidecar in `sha256sum` format; empty when there is none."""
    if not path.is_file():
        return {}
    sums = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.strip().partition("  ")
        if digest and name:
            sums[name] = digest.lower()
    return sums


def _record_local_sum(path: Path, name: str, digest: str) -> None:
    """Add one file's digest to the sidecar, rewriting it atomically."""
    sums = _read_local_sums(path) | {name: digest}
    text = "".join(f"{sums[n]}  {n}\n" for n in sorted(sums))
    with atomic_write(path, "w", encoding="utf-8") as handle:
        handle.write(text)


# --- Checking and downloading --------------------------------------------------------------------


def _check(path: Path, expected: str | None, origin: str, advice: str) -> str:
    """The file's sha256, after making sure it is `expected` (when there is one)."""
    actual = sha256_of(path)
    if expected is not None and actual != expected:
        raise ChecksumMismatchError(
            f"{path.name} at {path} has the wrong sha256:\n"
            f"  expected {expected} ({origin})\n  actual   {actual}\n{advice}"
        )
    return actual


def _download(file: RemoteFile, target: Path, expected: str | None, origin: str) -> str:
    """Download `file` to `target` atomically and return its sha256 (OSError: download failed)."""
    # The checks raise inside the block, so a short or wrong download is never renamed into place.
    digest, size = hashlib.sha256(), 0
    with atomic_write(target) as handle, _open_url(file.url) as response:
        while chunk := response.read(_CHUNK):
            handle.write(chunk)
            digest.update(chunk)
            size += len(chunk)
        # A connection cut short can end without an error; the announced length catches it.
        announced = getattr(response, "headers", {}).get("Content-Length")
        if announced is not None and int(announced) != size:
            raise OSError(f"got {size} bytes of the {announced} announced")
        actual = digest.hexdigest()
        if expected is not None and actual != expected:
            raise ChecksumMismatchError(
                f"{file.name} downloaded from {file.url} has the wrong sha256:\n"
                f"  expected {expected} ({origin})\n  actual   {actual}\n"
                "The download was discarded. Try again later; if it keeps happening the file "
                "upstream has changed: get a copy with the expected checksum and give its folder "
                f"as mirror= or {DATA_DIR_ENV}."
            )
    return actual


def _download_resumable(file: RemoteFile, target: Path, expected: str | None, origin: str) -> str:
    """Like _download, through `<name>.part`, continuing a part left by an earlier attempt."""
    part = target.with_name(target.name + ".part")
    part.parent.mkdir(parents=True, exist_ok=True)
    start = part.stat().st_size if part.exists() else 0
    with _open_url(file.url, start) as response:
        if start and getattr(response, "status", 206) != 206:
            start = 0  # the server sent the whole file again: start over
        announced = getattr(response, "headers", {}).get("Content-Length")
        with open(part, "ab" if start else "wb") as handle:
            size = 0
            while chunk := response.read(_CHUNK):
                handle.write(chunk)
                size += len(chunk)
            handle.flush()
            os.fsync(handle.fileno())
    if announced is not None and int(announced) != size:
        raise OSError(f"got {size} bytes of the {announced} announced (run again to resume)")
    actual = sha256_of(part)
    if expected is not None and actual != expected:
        part.unlink()
        raise ChecksumMismatchError(
            f"{file.name} downloaded from {file.url} has the wrong sha256:\n"
            f"  expected {expected} ({origin})\n  actual   {actual}\n"
            "The download was discarded; run again to download it afresh."
        )
    os.replace(part, target)
    return actual


def _local_copy(
    file: RemoteFile,
    expected: str | None,
    origin: str,
    mirror: Path | None,
    mirror_given_by: str,
    cache_folder: Path,
) -> Path | None:
    """The checked copy of `file` in the mirror, else in the cache; None when neither has it."""
    sums_path = cache_folder / LOCAL_SUMS_NAME
    untrusted = (
        f"If the file upstream really changed, delete its line in {sums_path} to accept it."
        if file.sha256 is None and expected is not None
        else ""
    )
    path = _in_mirror(mirror, file.name, cache_folder.name) if mirror is not None else None
    if path is not None:
        advice = (
            f"Replace it in the mirror (given by {mirror_given_by}) with the file from "
            f"{file.url or 'its source'}, or stop using the mirror. {untrusted}"
        )
    elif (cache_folder / file.name).is_file():
        path = cache_folder / file.name
        advice = f"Delete {path} to download it again. {untrusted}"
    else:
        return None
    actual = _check(path, expected, origin, advice.strip())
    if expected is None:
        _record_local_sum(sums_path, file.name, actual)
    return path


def available_offline(
    dataset: str, name: str, cache_dir: str | os.PathLike[str] | None = None
) -> bool:
    """Whether a mirror ($ANNOTATED_DATA_DIR) or the download cache holds the file (not checked)."""
    mirror = os.environ.get(DATA_DIR_ENV)
    if mirror and Path(mirror).is_dir() and _in_mirror(Path(mirror), name, dataset) is not None:
        return True
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return (cache / dataset / name).is_file()


def _shipped_copy(own: Path, expected: str | None) -> bool:
    """Whether the book's own copy of a file is there; a damaged one is refused."""
    if not own.is_file():
        return False
    advice = (
        f"The book's own copy is damaged: restore it (`git checkout -- {own}` in a clone, or "
        "reinstall the book)."
    )
    _check(own, expected, "the book's record", advice)
    return True


def _why_no_copy(file: RemoteFile, own: Path) -> str:
    """Why a file that is published nowhere could not be had."""
    if file.shipped:
        return (
            f"the book ships it as {own}, which is missing: restore it (`git checkout -- "
            f"{own.parent}` in a clone, or reinstall the book)"
        )
    return "not published online: only a local copy can provide it"


def verified_files(
    dataset: str,
    files: Sequence[RemoteFile],
    mirror: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
) -> dict[str, Path]:
    """File name -> path of a checked copy, from the mirror, the cache or the URL (in that order)."""
    mirror_folder, mirror_given_by = _mirror_folder(mirror)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache_folder = cache / dataset
    sums_path = cache_folder / LOCAL_SUMS_NAME
    recorded = _read_local_sums(sums_path)

    found: dict[str, Path] = {}
    missing: list[tuple[RemoteFile, str]] = []  # (file, why it could not be had)
    network_down = ""  # after a failed connection, the other downloads would only wait and fail
    for file in files:
        expected = file.sha256.lower() if file.sha256 else recorded.get(file.name)
        origin = "recorded in the book" if file.sha256 else f"recorded on first use in {sums_path}"
        own = shipped_data_dir() / dataset / file.name
        if file.shipped and _shipped_copy(own, expected):
            found[file.name] = own
            continue
        path = _local_copy(file, expected, origin, mirror_folder, mirror_given_by, cache_folder)
        if path is not None:
            found[file.name] = path
            continue

        if file.url is None:
            missing.append((file, _why_no_copy(file, own)))
            continue
        if not download:
            missing.append((file, "not downloaded: download=False"))
            continue
        if network_down:
            missing.append((file, f"not tried: {network_down}"))
            continue
        try:
            actual = _fetch_with_retries(file, cache_folder / file.name, expected, origin)
        except urllib.error.HTTPError as error:  # the server answered: other files may still work
            missing.append((file, f"download failed: HTTP {error.code} {error.reason}"))
            continue
        except (OSError, http.client.HTTPException) as error:
            network_down = f"the download of {file.name} failed ({error})"
            missing.append((file, f"download failed: {error}"))
            continue
        if expected is None:
            _record_local_sum(sums_path, file.name, actual)
        found[file.name] = cache_folder / file.name

    if missing:
        raise DataUnavailableError(
            _unavailable_message(dataset, missing, mirror_folder, cache_folder)
        )
    return found


def _unavailable_message(
    dataset: str, missing: list[tuple[RemoteFile, str]], mirror: Path | None, cache_folder: Path
) -> str:
    lines = [f"{len(missing)} {dataset} file(s) are not available:"]
    for file, why in missing:
        lines.append(f"  {file.name}  from {file.url or 'no public URL'}\n      ({why})")
    searched = f"the mirror {mirror} and " if mirror is not None else "no mirror and "
    lines += [
        f"Searched {searched}the download cache {cache_folder}.",
        "To provide the files without a network, put them in a folder (the files themselves, or "
        f"a {dataset}/ subfolder holding them) and either",
        "  - pass that folder as the mirror= argument, or",
        f"  - set the environment variable {DATA_DIR_ENV}=/path/to/that/folder,",
        f"or copy the files into the download cache {cache_folder}.",
    ]
    return "\n".join(lines)


# --- Multi30k ------------------------------------------------------------------------------------

# Multi30k task 1 (Elliott et al., 2016): English descriptions of Flickr30k images and their
# German translations, raw (cased, untokenized), one sentence per line, aligned across languages.
# The files at one commit of the repository, the last to change them (November 2020), not at the
# head of a branch: what the address serves cannot move under the checksums below.
MULTI30K_COMMIT = "c40b37b23d6387214f8ab37335b5a8672b9745f2"
MULTI30K_URL = (
    f"https://raw.githubusercontent.com/multi30k/dataset/{MULTI30K_COMMIT}/data/task1/raw/"
)
MULTI30K_SPLITS = (
    "train",
    "val",
    "test_2016_flickr",
    "test_2017_flickr",
    "test_2017_mscoco",
    "test_2018_flickr",
)
MULTI30K_LANGUAGES = ("de", "en")  # German source, English target
# The book's checksums of the files it trains and tests on, taken from the copies it was made
# with (Multi30k's repository publishes none). The 2017 and 2018 test sets have
# none here: they are trusted on first use (see the module's docstring).
MULTI30K_SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
}
MULTI30K_PAIRS = {"train": 29000, "val": 1014, "test_2016_flickr": 1000}  # sentence pairs


def multi30k_files(split: str) -> dict[str, RemoteFile]:
    """Language -> the Multi30k file of one split, with its URL and the book's checksum (if any)."""
    if split not in MULTI30K_SPLITS:
        raise ValueError(
            f"unknown Multi30k split {split!r}; the splits are {', '.join(MULTI30K_SPLITS)}"
        )
    names = {language: f"{split}.{language}.gz" for language in MULTI30K_LANGUAGES}
    return {
        language: RemoteFile(name, MULTI30K_URL + name, MULTI30K_SHA256.get(name))
        for language, name in names.items()
    }


def multi30k_paths(
    split: str,
    mirror: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
) -> dict[str, Path]:
    """Language -> path of the checked gzip file of one Multi30k split."""
    files = multi30k_files(split)
    paths = verified_files("multi30k", list(files.values()), mirror, cache_dir, download)
    return {language: paths[file.name] for language, file in files.items()}


def _read_lines(path: Path) -> list[str]:
    """A gzip UTF-8 file's lines, each without its final newline and otherwise untouched."""
    try:
        with gzip.open(path, "rb") as handle:
            data = handle.read()
    except (OSError, EOFError) as error:  # not gzip at all, or cut short
        raise ValueError(
            f"{path} is not a complete gzip file ({error}): delete it, and the next run takes a "
            "fresh copy (from the mirror, or downloaded)"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text: {error}") from None
    # split("\n"), not splitlines(): the latter also breaks at characters such as U+2028 or U+0085,
    # which may occur inside a sentence.
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline ending the last line does not start another one
    return lines


def read_multi30k(
    split: str,
    mirror: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
) -> list[tuple[str, str]]:
    """The (German, English) sentence pairs of one Multi30k split, in file order."""
    paths = multi30k_paths(split, mirror, cache_dir, download)
    german, english = _read_lines(paths["de"]), _read_lines(paths["en"])
    if len(german) != len(english):
        raise ValueError(
            f"the Multi30k {split} files are not aligned: {paths['de']} has {len(german)} lines "
            f"and {paths['en']} has {len(english)}. One of them is not the published file: "
            "replace it (delete it from the cache to download it again)."
        )
    return list(zip(german, english, strict=True))


# --- WMT 2014 English-German -----------------------------------------------------------------------

# The paper's big task (section 5.1): English -> German, trained on the WMT 2014 training corpora
# (about 4.5 million sentence pairs), tuned on newstest2013 and tested on newstest2014. The book
# reads every variant as three aligned splits of gzip text files, `<split>.<language>.gz`.
WMT14_SPLITS = ("train", "val", "test")  # val: newstest2013; test: newstest2014
WMT14_LANGUAGES = ("en", "de")  # English source, German target

# A 10,000-pair sample for CPU runs and CI (Moses-tokenized, with XML escapes; its test set is the
# filtered newstest2014 of 2,737 sentences). It is published nowhere else, so it ships with the book
# (data/wmt14-toy-ende/, and the wheel's annotated/data/wmt14-toy-ende/; see the README there).
WMT14_TOY = "wmt14-toy-ende"
WMT14_TOY_SHA256 = {
    "train.en.gz": "c0e857043bbf047979114c15bfe11430ce8d11cfe2b8a08d64d3982ddb35a226",
    "train.de.gz": "4432d7b491d1598dd80950063c8918093786e95160dc69a49284af6c626af14e",
    "val.en.gz": "347d8a7cbbbaf5c6014ef4a8bb913c18bbc0b101080740f35f09758d467545c9",
    "val.de.gz": "7a6a67a358a29c872c1e71bf4f5891ffad9f2944a018a0ffa08f3a8149960549",
    "test.en.gz": "aa6975add1796f35f61c8c6a64ce882d8a31747cced192a57a13848d31a0aa0a",
    "test.de.gz": "1c294e83a332199de580f1302e86f66eeb42dc6e6e0d4353b5d5e0afd8d8c421",
}
WMT14_TOY_PAIRS = {"train": 10000, "val": 3000, "test": 2737}
# Which newstest2014 each variant scores: sacreBLEU names the filtered set `wmt14`, the full one
# `wmt14/full`, and scores on the two are not comparable.
WMT14_TEST_SETS = {
    "toy": "newstest2014, filtered: 2,737 sentences (sacreBLEU's `-t wmt14 -l en-de`)",
    "full": "newstest2014, full: 3,003 sentences (sacreBLEU's `-t wmt14/full -l en-de`)",
}

# The full data: the archives of the WMT 2014 shared task on statmt.org (several gigabytes; they
# publish no checksums, so the first download is recorded and later ones are checked against it).
# `prepare_wmt14` extracts the aligned files below into the layout above.
WMT14_FULL = "wmt14-ende"
WMT14_ARCHIVES = {
    "training-parallel-europarl-v7.tgz": "https://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
    "training-parallel-commoncrawl.tgz": "https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
    "training-parallel-nc-v9.tgz": "https://www.statmt.org/wmt14/training-parallel-nc-v9.tgz",
    "dev.tgz": "https://www.statmt.org/wmt14/dev.tgz",
    "test-full.tgz": "https://www.statmt.org/wmt14/test-full.tgz",
}
# split -> (archive, English member, German member) for each corpus, in order. The test set is the
# full newstest2014 (3,003 sentences), the one `sacrebleu -t wmt14/full -l en-de` scores against.
WMT14_MEMBERS = {
    "train": (
        (
            "training-parallel-europarl-v7.tgz",
            "training/europarl-v7.de-en.en",
            "training/europarl-v7.de-en.de",
        ),
        ("training-parallel-commoncrawl.tgz", "commoncrawl.de-en.en", "commoncrawl.de-en.de"),
        (
            "training-parallel-nc-v9.tgz",
            "training/news-commentary-v9.de-en.en",
            "training/news-commentary-v9.de-en.de",
        ),
    ),
    "val": (("dev.tgz", "dev/newstest2013.en", "dev/newstest2013.de"),),
    "test": (
        (
            "test-full.tgz",
            "test-full/newstest2014-deen-src.en.sgm",
            "test-full/newstest2014-deen-ref.de.sgm",
        ),
    ),
}
_SEGMENT = re.compile(r"<seg[^>]*>(.*)</seg>")


def _check_wmt14_split(split: str) -> None:
    if split not in WMT14_SPLITS:
        raise ValueError(f"unknown WMT14 split {split!r}; the splits are {', '.join(WMT14_SPLITS)}")


def _member_lines(archive: tarfile.TarFile, name: str, where: Path) -> list[str]:
    """One text member of an opened archive as lines (the segments, for an .sgm file)."""
    try:
        handle = archive.extractfile(name)
    except KeyError:
        handle = None
    if handle is None:
        raise ValueError(
            f"{where} has no file {name}: it is not the WMT14 archive the book expects"
        )
    data = handle.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        # Web-crawled corpora carry the odd broken byte. Refusing the whole archive would cost
        # millions of good pairs for it, so the bad bytes become U+FFFD and the count is reported.
        text = data.decode("utf-8", errors="replace")
        bad = sum("\ufffd" in line for line in text.split("\n"))
        print(
            f"warning: {where}: {name}: {bad} lines were not valid UTF-8; "
            "their undecodable bytes were replaced by U+FFFD",
            file=sys.stderr,
        )
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if name.endswith(".sgm"):
        lines = [m.group(1).strip() for line in lines if (m := _SEGMENT.search(line))]
    return lines


def prepare_wmt14(
    mirror: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
) -> dict[str, dict[str, Path]]:
    """Fetch the WMT14 archives (resumably) and extract <split>.<language>.gz into the cache."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = cache / WMT14_FULL
    mirror_folder, _ = _mirror_folder(mirror)
    for where in ([mirror_folder / WMT14_FULL, mirror_folder] if mirror_folder else []) + [folder]:
        wanted = {
            split: {language: where / f"{split}.{language}.gz" for language in WMT14_LANGUAGES}
            for split in WMT14_SPLITS
        }
        if all(path.is_file() for paths in wanted.values() for path in paths.values()):
            return wanted  # extracted before: here, or in a class's shared folder
    archives = verified_files(
        WMT14_FULL,
        [RemoteFile(name, url, resumable=True) for name, url in WMT14_ARCHIVES.items()],
        mirror,
        cache_dir,
        download,
    )
    for split, corpora in WMT14_MEMBERS.items():
        english, german = [], []
        for archive_name, english_member, german_member in corpora:
            path = archives[archive_name]
            with tarfile.open(path) as archive:
                en = _member_lines(archive, english_member, path)
                de = _member_lines(archive, german_member, path)
            if len(en) != len(de):
                raise ValueError(
                    f"{path}: {english_member} has {len(en)} lines and {german_member} {len(de)}; "
                    "delete the archive to download it again"
                )
            english += en
            german += de
        for language, lines in (("en", english), ("de", german)):
            with (
                atomic_write(wanted[split][language]) as handle,
                gzip.GzipFile(fileobj=handle, mode="wb", mtime=0) as zipped,
            ):
                zipped.write("".join(line + "\n" for line in lines).encode("utf-8"))
    return wanted


def wmt14_paths(
    split: str,
    variant: str = "toy",
    mirror: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
) -> dict[str, Path]:
    """Language -> path of one split's gzip file, for the "toy" sample or the "full" data."""
    _check_wmt14_split(split)
    if variant == "full":
        return prepare_wmt14(mirror, cache_dir, download)[split]
    if variant != "toy":
        raise ValueError(f"unknown WMT14 variant {variant!r}: choose 'toy' or 'full'")
    files = {
        language: RemoteFile(
            f"{split}.{language}.gz", None, WMT14_TOY_SHA256[f"{split}.{language}.gz"], shipped=True
        )
        for language in WMT14_LANGUAGES
    }
    paths = verified_files(WMT14_TOY, list(files.values()), mirror, cache_dir, download)
    return {language: paths[file.name] for language, file in files.items()}


def read_wmt14(
    split: str,
    variant: str = "toy",
    mirror: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
) -> list[tuple[str, str]]:
    """The (English, German) sentence pairs of one WMT14 split, in file order, as stored."""
    paths = wmt14_paths(split, variant, mirror, cache_dir, download)
    english, german = _read_lines(paths["en"]), _read_lines(paths["de"])
    if len(english) != len(german):
        raise ValueError(
            f"the WMT14 {split} files are not aligned: {paths['en']} has {len(english)} lines "
            f"and {paths['de']} has {len(german)}. Replace the one that is not the right file."
        )
    return list(zip(english, german, strict=True))


# --- One shared, read-only data folder for a class -----------------------------------------------

# The data sets a class may need, by the name `prepare_class_folder` takes. Multi30k is published
# (the default); the WMT sample ships with the book, so a class needs it only to read it from one
# shared place; the full WMT data is several gigabytes.
CLASS_SETS = ("multi30k", "wmt14-toy", "wmt14")
BOOK_MULTI30K_SPLITS = ("train", "val", "test_2016_flickr")  # the splits the chapters read


def prepare_class_folder(
    folder: str | os.PathLike[str],
    sets: Sequence[str] = ("multi30k",),
    mirror: str | os.PathLike[str] | None = None,
    download: bool = True,
) -> list[Path]:
    """Fill `folder` with checked copies of the data sets, laid out as a mirror, readable by all.

    A teacher runs this once (`python -m annotated.base.datasets FOLDER`); every student then sets
    `ANNOTATED_DATA_DIR=FOLDER` and reads the files where they are. Files come from `mirror`, from
    files already in `folder`, or from their public URLs, and are checked as always. The folder's
    files are made readable (and its folders searchable) by everyone, writable by the teacher only.
    """
    unknown = sorted(set(sets) - set(CLASS_SETS))
    if unknown:
        raise ValueError(f"unknown data sets {unknown}: choose from {', '.join(CLASS_SETS)}")
    folder = Path(folder).expanduser().resolve()
    placed: list[Path] = []

    def place(dataset: str, paths: Sequence[Path]) -> None:
        for path in paths:
            target = folder / dataset / path.name
            if path.resolve() != target:  # found in the mirror: the class gets its own copy
                with open(path, "rb") as source, atomic_write(target) as copy:
                    shutil.copyfileobj(source, copy)
            placed.append(target)

    if "multi30k" in sets:
        for split in BOOK_MULTI30K_SPLITS:
            place("multi30k", multi30k_paths(split, mirror, folder, download).values())
    if "wmt14-toy" in sets:
        for split in WMT14_SPLITS:
            place(WMT14_TOY, wmt14_paths(split, "toy", mirror, folder, download).values())
    if "wmt14" in sets:
        for paths in prepare_wmt14(mirror, folder, download).values():
            place(WMT14_FULL, paths.values())
    for path in [folder, *folder.rglob("*")]:  # readable by the class, whatever the umask was
        mode = path.stat().st_mode
        extra = 0o755 if path.is_dir() else 0o644
        path.chmod((stat.S_IMODE(mode) | extra) & ~0o022)
    return placed


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m annotated.base.datasets",
        description="Prepare one shared data folder for a class: checked copies of the data "
        "sets, readable by every student. Students then set "
        f"{DATA_DIR_ENV}=FOLDER and download nothing.",
    )
    parser.add_argument("folder", type=Path, help="the folder to fill (created if missing)")
    parser.add_argument(
        "--sets",
        nargs="+",
        choices=CLASS_SETS,
        default=["multi30k"],
        help="data sets to include (default: multi30k; wmt14-toy is copied from the book's own data; "
        "wmt14 is several GB)",
    )
    parser.add_argument(
        "--from",
        dest="mirror",
        type=Path,
        default=None,
        help="a local folder that already holds the files (default: $ANNOTATED_DATA_DIR, else the "
        "web)",
    )
    parser.add_argument("--no-download", action="store_true", help="use local copies only")
    args = parser.parse_args(argv)
    try:
        placed = prepare_class_folder(args.folder, args.sets, args.mirror, not args.no_download)
    except (DataUnavailableError, ChecksumMismatchError, ValueError, OSError) as error:
        print(f"datasets: {error}", file=sys.stderr)
        return 2
    size = sum(path.stat().st_size for path in placed) / 1e6
    folder = args.folder.expanduser().resolve()
    print(f"{len(placed)} checked files ({size:.0f} MB) in {folder}, readable by everyone.")
    print(f"Students (or the class server's environment): export {DATA_DIR_ENV}={folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
