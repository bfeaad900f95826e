"""`LocalSandbox` (bubblewrap): telling a missing or broken `bwrap` apart, with a how-to."""

from __future__ import annotations

import pytest

from agentrl.sandbox import LocalSandbox, SandboxUnavailableError
from agentrl.sandbox.local import unavailable_reason


def test_missing_bwrap_says_how_to_install_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    why = unavailable_reason()
    assert why is not None and "apt-get install -y bubblewrap" in why
    with pytest.raises(SandboxUnavailableError, match="apt-get install -y bubblewrap"):
        LocalSandbox()


def test_broken_bwrap_is_reported_with_its_error(tmp_path, monkeypatch) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    why = unavailable_reason()
    assert why is not None
    assert "No permissions to create new namespace" in why and "user namespaces" in why


def test_working_bwrap_runs_code(require_bwrap: None) -> None:
    assert unavailable_reason() is None
    result = LocalSandbox(timeout=10).run("print(input()[::-1])", stdin="abc\n")
    assert (result.stdout, result.exit_code) == ("cba\n", 0)
