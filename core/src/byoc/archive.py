"""The zip layer of a ``.byoc`` file: its directory checked before a byte of a member is read
(plain names, no duplicates, known flags and methods, sizes and compression ratios under
``Limits``), and members read with a cap and, where the manifest names them, their size and
sha256 checked."""

from __future__ import annotations

import hashlib
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from byoc.errors import ArtifactError
from byoc.export import MANIFEST

_MEMBER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
# zip general-purpose flags a reader may meet: deflate options, data descriptor, UTF-8 names
_KNOWN_FLAGS = 0x0002 | 0x0004 | 0x0008 | 0x0800


@dataclass(frozen=True)
class Limits:
    """What ``load`` accepts before reading a byte of a member (zip-bomb and damage guards)."""

    max_manifest: int = 8 << 20  # bytes of manifest.json
    max_member: int = 4 << 30  # bytes of one member, uncompressed
    max_total: int = 8 << 30  # bytes of all members, uncompressed
    max_members: int = 100_000
    max_ratio: int = 100  # uncompressed / compressed, for members above ratio_floor bytes
    ratio_floor: int = 1 << 20


LIMITS = Limits()


class Archive:
    """Reads members of a zip after checking its directory: names, sizes, ratios, no extras."""

    def __init__(self, zf: zipfile.ZipFile, where: str, limits: Limits) -> None:
        self.zf, self.where, self.limits = zf, where, limits
        infos = zf.infolist()
        if len(infos) > limits.max_members:
            raise ArtifactError(
                f"{where}: the archive has {len(infos)} members, more than the limit "
                f"{limits.max_members}; it is not a file byoc wrote"
            )
        self.infos: dict[str, zipfile.ZipInfo] = {}
        total = 0
        for info in infos:
            self._check_info(info)
            total += info.file_size
            if total > limits.max_total:
                raise ArtifactError(
                    f"{where}: the members add up to more than {limits.max_total} bytes "
                    "uncompressed; refusing to read it"
                )
            self.infos[info.filename] = info

    def _check_info(self, info: zipfile.ZipInfo) -> None:
        name, where, limits = info.filename, self.where, self.limits
        if not plain_name(name):
            raise ArtifactError(
                f"{where}: member name {name!r} is not a plain file name (no directories, "
                "absolute paths or '..'); the file is damaged or hostile"
            )
        if name in self.infos:
            raise ArtifactError(f"{where}: member {name!r} appears twice; the file is damaged")
        if info.flag_bits & 0x1:
            raise ArtifactError(f"{where}: member {name!r} is encrypted; byoc never writes that")
        if info.flag_bits & ~_KNOWN_FLAGS:
            raise ArtifactError(
                f"{where}: member {name!r} has zip flags {info.flag_bits:#06x} that byoc never "
                "writes (patched data, strong encryption, ...); the file is damaged"
            )
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ArtifactError(
                f"{where}: member {name!r} uses zip compression method {info.compress_type}; "
                "byoc reads stored and deflated members only"
            )
        if info.file_size > limits.max_member:
            raise ArtifactError(
                f"{where}: member {name!r} declares {info.file_size} bytes, more than the limit "
                f"{limits.max_member}"
            )
        stored = info.compress_type == zipfile.ZIP_STORED
        if stored and info.compress_size != info.file_size:
            raise ArtifactError(f"{where}: member {name!r} has inconsistent sizes; damaged file")
        if info.file_size > limits.ratio_floor and (
            info.file_size > limits.max_ratio * max(info.compress_size, 1)
        ):
            raise ArtifactError(
                f"{where}: member {name!r} expands {info.compress_size} bytes to "
                f"{info.file_size} (more than {limits.max_ratio}x); refusing a possible zip bomb"
            )

    def expect(self, names: set[str]) -> None:
        """Every member the manifest names is there, and there is nothing else."""
        missing = sorted(names - set(self.infos))
        extra = sorted(set(self.infos) - names)
        if missing:
            raise ArtifactError(
                f"{self.where}: {MANIFEST} names member(s) {', '.join(missing)} that the archive "
                "lacks; the file is incomplete: recompile the model"
            )
        if extra:
            raise ArtifactError(
                f"{self.where}: the archive has member(s) {', '.join(extra[:5])} that "
                f"{MANIFEST} does not name; the file was changed after byoc wrote it"
            )

    def read(self, name: str, cap: int) -> bytes:
        info = self.infos.get(name)
        if info is None:
            raise ArtifactError(
                f"{self.where}: no {name} in the archive; it is not a .byoc file "
                "(write one with `byoc compile MODEL -o FILE.byoc`)"
            )
        if info.file_size > cap:
            raise ArtifactError(
                f"{self.where}: {name} declares {info.file_size} bytes, more than the limit {cap}"
            )
        try:
            with self.zf.open(info) as fh:
                data = fh.read(cap + 1)
        except Exception as exc:  # zipfile and zlib raise many types on damaged input
            raise ArtifactError(
                f"{self.where}: member {name!r} cannot be read ({exc}); the file is damaged: "
                "recompile the model"
            ) from None
        if len(data) != info.file_size:
            raise ArtifactError(
                f"{self.where}: member {name!r} has {len(data)} bytes, but the archive declares "
                f"{info.file_size}; the file is damaged"
            )
        return data

    def read_entry(self, entry: Mapping[str, Any]) -> bytes:
        """A member named by the manifest, with its size and sha256 checked."""
        name = entry["member"]
        if self.infos[name].file_size != entry["size"]:
            raise ArtifactError(
                f"{self.where}: member {name!r} has {self.infos[name].file_size} bytes, but "
                f"{MANIFEST} says {entry['size']}; the file is damaged: recompile the model"
            )
        data = self.read(name, entry["size"])
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise ArtifactError(
                f"{self.where}: member {name!r} does not match its sha256 in {MANIFEST}; the "
                "file is damaged or was changed: recompile the model"
            )
        return data


def plain_name(name: str) -> bool:
    """Whether ``name`` is a member name byoc writes: no directories, no '..', no leading dot."""
    return bool(_MEMBER.fullmatch(name)) and ".." not in name
