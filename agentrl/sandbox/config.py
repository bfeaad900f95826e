"""Configuration of the sandboxes (one pydantic model, shared by Docker and local backends)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_IMAGE = "agentrl-sandbox:latest"


class SandboxConfig(BaseModel):
    """Limits and pool settings for running untrusted code."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    backend: str = "docker"
    """`docker` (containers, strong isolation), `local` (bubblewrap, weaker isolation), a
    backend registered with `agentrl.sandbox.register_sandbox`, or `module.path:Class`."""
    image: str = DEFAULT_IMAGE
    """Docker image with `python3` and a non-root user; `agentrl sandbox build` makes it."""
    user: str = "1000:1000"
    """User (uid:gid) the executor and the programs run as inside the container."""
    pool_size: int = Field(2, ge=1, le=64)
    """Warm containers kept ready; also the number of runs that can execute at once."""
    max_uses: int = Field(200, ge=1)
    """Runs after which a container is replaced by a fresh one."""
    timeout: float = Field(10.0, gt=0)
    """Default per-run timeout in seconds (a run can pass its own)."""
    timeout_grace: float = Field(1.5, gt=0)
    """Extra seconds the host waits past the timeout before killing the whole container."""
    memory_mb: int = Field(512, ge=32)
    """Memory limit of a container (RAM, no swap); going over kills the run (oom_killed)."""
    cpus: float = Field(1.0, gt=0)
    """CPU limit of a container, in cores."""
    pids_limit: int = Field(64, ge=8)
    """Most processes and threads alive at once in a container (stops fork bombs)."""
    work_mb: int = Field(64, ge=1)
    """Size of the tmpfs work directory (`/work`); writes beyond it fail with ENOSPC."""
    tmp_mb: int = Field(16, ge=1)
    """Size of the tmpfs mounted at `/tmp`."""
    max_file_bytes: int = Field(32 << 20, ge=1024)
    """Largest file a program may write (RLIMIT_FSIZE)."""
    max_output_bytes: int = Field(1 << 20, ge=1024)
    """Bytes kept from each of stdout and stderr; the rest is discarded and `truncated` set."""
    network: str = "none"
    """Docker network mode: `none` (only loopback, the default) or the name of a network you
    created with your own egress rules (e.g. an allowlisting proxy) for tools that need one."""
    replace_on_leftover: bool = True
    """Replace a container whose program left processes running after it exited."""
    fork_python: bool = True
    """Run Python code in a fork of the container's pre-started interpreter (a few ms) rather
    than a fresh `python3` process (tens of ms); isolation is the same."""
    start_timeout: float = Field(30.0, gt=0)
    """Seconds to wait for a new container's executor to answer."""

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, name: str) -> str:
        """A registered backend or a `module.path:Class` (the error names the known ones)."""
        from agentrl.sandbox.registry import check_backend

        return check_backend(name)
