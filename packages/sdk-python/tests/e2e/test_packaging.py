"""Packaging: the wheel and the sdist are built (python3 -m build --no-isolation), each is installed
into a fresh venv outside the repository (--system-site-packages, for Debian's aiohttp), and the
typed owner script (examples/owner.py) runs from there against the live API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, Iterator

import pytest

from ..conftest import PACKAGE_ROOT, REPO_ROOT
from .harness import Stack, user_id


@pytest.fixture(scope="module")
def built() -> Iterator[Dict[str, Path]]:
    with tempfile.TemporaryDirectory(prefix="botdir-packaging-") as tmp:
        out = Path(tmp) / "dist"
        subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--skip-dependency-check", "--outdir", str(out), str(PACKAGE_ROOT)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        wheel = next(out.glob("botdir-1.0.0-py3-none-any.whl"))
        sdist = next(out.glob("botdir-1.0.0.tar.gz"))
        yield {"tmp": Path(tmp), "wheel": wheel, "sdist": sdist}


def test_the_wheel_and_the_sdist_carry_the_package_its_types_and_its_license(built: Dict[str, Path]) -> None:
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = set(wheel.namelist())
        assert {"botdir/__init__.py", "botdir/py.typed", "botdir/aio.py", "botdir/receivers.py"} <= names
        metadata = wheel.read("botdir-1.0.0.dist-info/METADATA").decode()
    assert "Requires-Python: >=3.9" in metadata
    assert "Provides-Extra: aiohttp" in metadata
    assert "License-Expression: MIT" in metadata or "License: MIT" in metadata
    with tarfile.open(built["sdist"]) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {"pyproject.toml", "README.md", "LICENSE", "src/botdir/py.typed", "src/botdir/webhook.py"} <= members
    assert not any(m.startswith("tests/") for m in members)
    # The project's MIT license, as at the repository's root.
    assert (PACKAGE_ROOT / "LICENSE").read_text("utf-8") == (REPO_ROOT / "LICENSE").read_text("utf-8")


@pytest.mark.parametrize("artefact", ["wheel", "sdist"])
def test_the_owner_script_runs_from_a_fresh_venv_against_the_live_api(stack: Stack, built: Dict[str, Path], artefact: str) -> None:
    venv = built["tmp"] / f"venv-{artefact}"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    install = [python, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check", "--quiet"]
    if artefact == "sdist":
        install.append("--no-build-isolation")
    subprocess.run([*install, str(built[artefact])], check=True, capture_output=True, timeout=300)

    bot = stack.known_bot()
    voter = user_id()
    stack.vote(bot["id"], voter)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update({"BOTDIR_BASE_URL": stack.api, "BOTDIR_TOKEN": bot["token"], "BOTDIR_BOT_ID": bot["id"], "BOTDIR_VOTER": voter})
    script = built["tmp"] / "owner.py"
    script.write_text((PACKAGE_ROOT / "examples" / "owner.py").read_text("utf-8"), "utf-8")
    ran = subprocess.run([python, str(script)], cwd=built["tmp"], env=env, capture_output=True, timeout=300, text=True)
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    assert out["module"].startswith(str(venv)) and not out["module"].startswith(str(REPO_ROOT))
    assert out == {
        **out,
        "version": "1.0.0",
        "server_count": 1482,
        "commands": 2,
        "has_voted": True,
        "votes": 1,
        "settled_votes": 0,  # the vote is younger than 10 s: not listed by votes_since yet
        "autoposted": 1500,
        "verified": ["msg_1", "vote.create", "standard"],
        "refused": 401,
    }
    assert stack.server_count(bot["id"]) == 1500
