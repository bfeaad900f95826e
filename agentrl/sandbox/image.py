"""Building the sandbox image: from the shipped Dockerfile, or offline with debootstrap.

Both paths give the same contract: `python3` (3.11, full standard library) on PATH, a
non-root user `sandbox` with uid/gid 1000, and `/work` as the working directory.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl.sandbox.config import DEFAULT_IMAGE
from agentrl.sandbox.docker import connect

DOCKERFILE = Path(__file__).parent / "Dockerfile"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
OFFLINE_PACKAGES = ("python3", "ca-certificates")
IMAGE_CHANGES = ["USER 1000:1000", "WORKDIR /work", 'CMD ["python3"]', "ENV LANG=C.UTF-8"]
# Trimmed from the offline root filesystem: package caches and documentation.
_TRIM = (
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/locale",
    "usr/share/info",
)


def image_exists(image: str = DEFAULT_IMAGE, client: Any = None) -> bool:
    """Whether the Docker daemon has `image`."""
    client = client or connect()
    try:
        client.images.get(image)
        return True
    except Exception:
        return False


def build_from_dockerfile(image: str = DEFAULT_IMAGE, log: Callable[[str], None] = print) -> str:
    """Build `image` from the shipped Dockerfile (needs Docker Hub and PyPI); return its id."""
    client = connect(timeout=600)
    with open(DOCKERFILE, "rb") as dockerfile:  # no build context: the Dockerfile copies nothing
        built, logs = client.images.build(fileobj=dockerfile, tag=image, rm=True, pull=True)
    for entry in logs:
        if "stream" in entry and entry["stream"].strip():
            log(entry["stream"].rstrip())
    return built.id


def build_offline(
    image: str = DEFAULT_IMAGE,
    *,
    mirror: str = DEBIAN_MIRROR,
    suite: str = "bookworm",
    log: Callable[[str], None] = print,
) -> str:
    """Build `image` with no container registry: debootstrap a Debian root, then import it.

    Needs root, `debootstrap` and a reachable Debian mirror (a package registry). Returns the
    image id.
    """
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed: apt-get install -y debootstrap")
    client = connect(timeout=600)
    with tempfile.TemporaryDirectory(prefix="agentrl-rootfs-") as tmp:
        root = Path(tmp) / "root"
        log(f"debootstrap {suite} from {mirror} into {root} ...")
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(OFFLINE_PACKAGES)}",
                suite,
                str(root),
                mirror,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        _add_user(root)
        for rel in _TRIM:
            shutil.rmtree(root / rel, ignore_errors=True)
        (root / "work").mkdir(exist_ok=True)
        (root / "work").chmod(0o1777)
        tarball = Path(tmp) / "root.tar"
        log("packing the root filesystem ...")
        subprocess.run(
            [
                "tar",
                "-C",
                str(root),
                "--exclude=./proc/*",
                "--exclude=./sys/*",
                "--exclude=./dev/*",
                "-cf",
                str(tarball),
                ".",
            ],
            check=True,
        )
        repository, _, tag = image.partition(":")
        log(f"docker import -> {image} ...")
        client.api.import_image_from_file(
            str(tarball), repository=repository, tag=tag or "latest", changes=IMAGE_CHANGES
        )
    image_id = client.images.get(image).id
    log(f"built {image} ({image_id[:19]})")
    return image_id


def _add_user(root: Path) -> None:
    """Add user and group `sandbox` (1000:1000) to the root filesystem, home `/work`."""
    with open(root / "etc/passwd", "a") as f:
        f.write("sandbox:x:1000:1000:agentrl sandbox:/work:/usr/sbin/nologin\n")
    with open(root / "etc/group", "a") as f:
        f.write("sandbox:x:1000:\n")
    shadow = root / "etc/shadow"
    if shadow.exists():
        with open(shadow, "a") as f:
            f.write("sandbox:!:19000:0:99999:7:::\n")
