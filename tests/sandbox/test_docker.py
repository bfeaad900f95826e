"""DockerSandbox against a real daemon: the contract, the pool and the adversarial suite.

Every attack must end within its timeout + 2 s with a structured ExecResult, leave the host
unaffected, and the next call in the same pool must work.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from agentrl.sandbox import ExecResult

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]


def attack(sandbox, code, timeout: float = 2.0, **kwargs) -> ExecResult:
    """Run `code`, check the time bound and that the pool still works afterwards."""
    start = time.monotonic()
    result = sandbox.run(code, timeout=timeout, **kwargs)
    assert time.monotonic() - start < timeout + 2.0, result
    assert isinstance(result, ExecResult)
    after = sandbox.run("print(6 * 7)", timeout=10)
    assert after.stdout == "42\n" and after.ok, after
    return result


def test_hello_stdin_files_and_exit_code(docker_sandbox) -> None:
    r = docker_sandbox.run(
        "import sys; print(input().upper(), open('d/x.txt').read()); sys.exit(3)",
        stdin="abc\n",
        files={"d/x.txt": "file!"},
    )
    assert (r.stdout, r.exit_code, r.timed_out) == ("ABC file!\n", 3, False)


def test_command_runs_as_non_root_in_fresh_dir(docker_sandbox) -> None:
    first = docker_sandbox.run(["sh", "-c", "id -u; pwd; ls -A; touch left.txt"])
    second = docker_sandbox.run(["sh", "-c", "ls -A"])
    uid, cwd, listing = first.stdout.split("\n", 2)
    assert uid == "1000" and cwd.startswith("/work/run-")
    assert ".stdin" in listing and "left.txt" not in second.stdout


def test_exception_and_syntax_error(docker_sandbox) -> None:
    r = attack(docker_sandbox, "raise ValueError('boom')")
    assert r.exit_code == 1 and "ValueError: boom" in r.stderr and "_executor" not in r.stderr
    r = attack(docker_sandbox, "def f(:\n    pass\n")
    assert r.exit_code == 1 and "SyntaxError" in r.stderr


def test_infinite_loop(docker_sandbox) -> None:
    r = attack(docker_sandbox, "while True:\n    pass\n", timeout=1.0)
    assert r.timed_out and r.exit_code != 0


def test_fork_bomb(docker_sandbox) -> None:
    code = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    r = attack(docker_sandbox, code, timeout=2.0)
    assert r.timed_out or r.exit_code != 0


def test_memory_bomb(docker_sandbox) -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(b'x' * (16 << 20))\n"
    r = attack(docker_sandbox, code, timeout=5.0)
    assert r.oom_killed or "MemoryError" in r.stderr, r


def test_writing_1gb_to_disk(docker_sandbox) -> None:
    code = (
        "block = b'x' * (1 << 20)\n"
        "with open('big.bin', 'wb') as f:\n"
        "    for _ in range(1024):\n"
        "        f.write(block)\n"
    )
    r = attack(docker_sandbox, code, timeout=5.0)
    assert r.exit_code != 0 and ("No space left" in r.stderr or "too large" in r.stderr), r


def test_printing_100mb(docker_sandbox) -> None:
    r = attack(docker_sandbox, "import sys\nsys.stdout.write('x' * 100_000_000)\n", timeout=5.0)
    assert r.truncated and len(r.stdout) == 64 * 1024


def test_background_process_is_killed_and_container_replaced(docker_sandbox) -> None:
    code = (
        "import subprocess\n"
        "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "print('spawned')\n"
    )
    replaced = docker_sandbox.num_replaced
    r = attack(docker_sandbox, code)
    assert r.stdout == "spawned\n" and r.duration < 1.5
    assert docker_sandbox.num_replaced == replaced + 1
    docker_sandbox.wait_ready()
    for _ in range(2):  # no container of the pool has a leftover process
        ps = docker_sandbox.run(
            "import os; print(sorted(p for p in os.listdir('/proc') if p.isdigit()))"
        )
        pids = eval(ps.stdout)  # our own output, a list literal of digit strings
        assert pids == ["1", str(pids[-1])] and len(pids) == 2, ps


def test_network_only_loopback_and_host_listener_unreachable(docker_sandbox) -> None:
    r = attack(docker_sandbox, "import socket; print(sorted(n for _, n in socket.if_nameindex()))")
    assert r.stdout == "['lo']\n"
    with socket.socket() as listener:  # a listener on the HOST's loopback
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        code = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
            "    print('connected')\n"
            "except OSError as e:\n"
            "    print('refused', type(e).__name__)\n"
        )
        r = attack(docker_sandbox, code)
        assert r.stdout.startswith("refused"), r
        with pytest.raises(TimeoutError):
            listener.accept()


def test_host_files_are_not_visible(docker_sandbox) -> None:
    code = (
        "import os\n"
        f"print(os.path.exists({str(REPO / 'pyproject.toml')!r}))\n"
        "try:\n"
        "    open('/etc/shadow').read()\n"
        "    print('read shadow')\n"
        "except OSError as e:\n"
        "    print(type(e).__name__)\n"
    )
    r = attack(docker_sandbox, code)
    assert r.stdout == "False\nPermissionError\n"


def test_docker_socket_is_absent(docker_sandbox) -> None:
    code = "import os\nprint([p for p in ('/var/run/docker.sock', '/run/docker.sock') if os.path.exists(p)])"
    assert attack(docker_sandbox, code).stdout == "[]\n"


def test_killing_pid_1(docker_sandbox) -> None:
    code = "import os, signal\nfor s in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):\n    os.kill(1, s)\nprint('alive')\n"
    r = attack(docker_sandbox, code)
    assert r.stdout == "alive\n" or r.sandbox_error is None


def test_changing_resource_limits(docker_sandbox) -> None:
    code = (
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "try:\n"
        "    resource.setrlimit(resource.RLIMIT_NOFILE, (hard + 1, hard + 1))\n"
        "    print('raised')\n"
        "except (ValueError, OSError):\n"
        "    print('denied')\n"
        "try:\n"
        "    open('/sys/fs/cgroup/memory/memory.limit_in_bytes', 'w').write('-1')\n"
        "    print('cgroup written')\n"
        "except OSError:\n"
        "    print('denied')\n"
    )
    assert attack(docker_sandbox, code).stdout == "denied\ndenied\n"


def test_binary_and_invalid_utf8_output(docker_sandbox) -> None:
    r = attack(
        docker_sandbox, "import sys\nsys.stdout.buffer.write(bytes(range(256)) + b'\\xff\\xfe')\n"
    )
    assert r.exit_code == 0 and "\ufffd" in r.stdout and "\x00" in r.stdout


def test_10mb_program(docker_sandbox) -> None:
    code = "# " + "a" * (10 << 20) + "\nprint('big ok')\n"
    r = attack(docker_sandbox, code, timeout=5.0)
    assert r.stdout == "big ok\n"


def test_read_only_root(docker_sandbox) -> None:
    code = "try:\n    open('/usr/evil', 'w')\nexcept OSError as e:\n    print(e.errno)\n"
    assert attack(docker_sandbox, code).stdout == "30\n"  # EROFS


def test_concurrent_calls_and_async(docker_sandbox) -> None:
    import asyncio

    async def many() -> list[ExecResult]:
        return await asyncio.gather(*(docker_sandbox.arun(f"print({i})") for i in range(6)))

    results = asyncio.run(many())
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]


def test_health_check_and_recycling(docker_sandbox) -> None:
    docker_sandbox.wait_ready()
    assert docker_sandbox.health_check() == {"healthy": 2, "replaced": 0}


def test_containers_labelled_and_removed_on_close(require_docker: None) -> None:
    from agentrl.sandbox import DockerSandbox

    sandbox = DockerSandbox(pool_size=1, max_uses=2)
    client = sandbox.client
    ids = sandbox.container_ids()
    container = client.containers.get(ids[0])
    host = container.attrs["HostConfig"]
    assert container.labels["agentrl.sandbox.owner"].endswith(f":{os.getpid()}")
    assert host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"] and host["NetworkMode"] == "none"
    assert "no-new-privileges" in host["SecurityOpt"] and not host["Binds"]
    for _ in range(2):
        assert sandbox.run("print(1)").ok
    sandbox.wait_ready()
    new_ids = sandbox.container_ids()
    assert new_ids != ids  # recycled after max_uses
    sandbox.close()
    left = {c.id for c in client.containers.list(all=True, filters={"label": "agentrl.sandbox=1"})}
    assert not left & set(ids + new_ids)


def test_leftovers_of_dead_owner_are_reaped(require_docker: None) -> None:
    from agentrl.sandbox.docker import LABEL, OWNER_LABEL, connect, reap_leftovers

    client = connect()
    dead = socket.gethostname() + ":999999"
    container = client.containers.create(
        "agentrl-sandbox:latest", command=["true"], labels={LABEL: "1", OWNER_LABEL: dead}
    )
    assert reap_leftovers(client) >= 1
    import docker.errors

    with pytest.raises(docker.errors.NotFound):
        client.containers.get(container.id)


def test_no_daemon_gives_clear_error(monkeypatch) -> None:
    from agentrl.sandbox import DockerSandbox, SandboxUnavailableError

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(SandboxUnavailableError, match="dockerd"):
        DockerSandbox(pool_size=1)


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "--env", "tool-python", "--model", "tiny", "--episodes", "2"],
        ["rollout", "--env", "code", "--model", "tiny", "--episodes", "1", "--out", "OUT"],
        ["train", "--env", "tool-python", "--model", "tiny", "--steps", "1", "--run-dir", "OUT"],
    ],
)
def test_without_docker_commands_say_how_to_start_it(monkeypatch, tmp_path, argv) -> None:
    """Before a model loads or a folder is made, not as an `env_error` per episode."""
    from typer.testing import CliRunner

    from agentrl.cli import app

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [str(out) if a == "OUT" else a for a in argv])
    assert result.exit_code == 1, result.output
    assert "runs code in a Docker sandbox, and no Docker daemon answers" in result.output
    assert "sudo systemctl start docker" in result.output
    assert not out.exists()


def test_an_env_on_the_local_sandbox_needs_no_docker(monkeypatch) -> None:
    from agentrl.cli._common import require_services

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    require_services("tool-python", {"sandbox_config": {"backend": "local"}})  # no exit
    require_services("tool-calc")
    require_services("tool-python", {"tool": False})


def test_the_no_tool_control_trains_without_docker(monkeypatch, tmp_path) -> None:
    """`tool: false` offers no tool, so nothing runs in the sandbox: no daemon is asked for."""
    from typer.testing import CliRunner

    from agentrl.cli import app

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    argv = ["train", "--env", "tool-python", "--model", "tiny", "--steps", "1"]
    argv += ["--set", "env.kwargs.tool=false", "--set", "trainer.num_groups=1"]
    argv += ["--set", "rollout.group_size=2", "--run-dir", str(tmp_path / "run")]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert "Docker" not in result.output
    assert (tmp_path / "run" / "metrics.jsonl").is_file()
