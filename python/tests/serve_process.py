"""A server process for the tests, checks and benchmarks that talk to one over HTTP
(python/tests/test_serve.py, scripts/gpu_serve_check.py, bench/bench_serve.py): started on a free port
of 127.0.0.1 that it writes to a file (`qkv serve --port 0 --port-file F`, or bench/ct2_server.py),
and waited for until GET /health answers 200. Standard library only."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from typing import IO


class ServeProcess:
    """`command` without --port-file (added here). Its stdout and stderr go to `log` (an open file),
    or to pipes the caller may read (`proc.stderr`). Raises RuntimeError, with what the server said
    where it can, when the process exits or is not ready within `timeout` seconds."""

    def __init__(self, command: list[str], log: IO[str] | None = None, timeout: float = 60, what: str = "qkv serve"):
        self.what = what
        fd, self.port_file = tempfile.mkstemp(prefix="qkv-serve-port-")
        os.close(fd)
        os.unlink(self.port_file)  # the server writes it once it listens
        pipe = subprocess.PIPE if log is None else log
        self.proc = subprocess.Popen([*command, "--port-file", self.port_file], stdout=pipe,
                                     stderr=subprocess.PIPE if log is None else subprocess.STDOUT, text=True)
        deadline = time.monotonic() + timeout
        while not (os.path.exists(self.port_file) and open(self.port_file).read().strip()):
            self._check_running(deadline, "did not start")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{int(open(self.port_file).read())}"
        while self.get("/health")[0] != 200:
            self._check_running(deadline, "did not get ready")
            time.sleep(0.05)

    def _check_running(self, deadline: float, what_failed: str) -> None:
        if self.proc.poll() is not None:
            said = self.proc.stderr.read() if self.proc.stderr else "(see its log)"
            raise RuntimeError(f"{self.what} exited {self.proc.returncode}:\n{said}")
        if time.monotonic() > deadline:
            self.kill()
            raise RuntimeError(f"{self.what} {what_failed}")

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
                timeout: float = 120) -> tuple[int, dict, str]:
        """(status, headers, text); status 0 where no answer came (refused, reset, timed out: the text
        says which)."""
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read().decode("utf-8")
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read().decode("utf-8")
        except OSError as e:
            return 0, {}, str(e)

    def get(self, path: str) -> tuple[int, str]:
        status, _, text = self.request("GET", path, timeout=5 if path == "/health" else 120)
        return status, text

    def post(self, path: str, obj, headers: dict | None = None) -> tuple[int, dict]:
        """The status and the JSON answer ({"error": ...} where none came or it was not JSON)."""
        status, _, text = self.request("POST", path, json.dumps(obj).encode("utf-8"),
                                       {"Content-Type": "application/json", **(headers or {})})
        try:
            return status, json.loads(text) if text else {}
        except ValueError:
            return status, {"error": text}

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Sends `sig` (a drain), then the exit status; past `timeout`, SIGKILL and a RuntimeError."""
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"{self.what} did not exit within {timeout:.0f} s of signal {sig}")
        finally:
            self._forget_port()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._forget_port()

    def _forget_port(self) -> None:
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
