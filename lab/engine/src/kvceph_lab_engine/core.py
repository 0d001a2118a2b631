"""The engine core as a process of its own, as vLLM V1 runs ``EngineCore_DP0`` beside its API
server (``--distributed-executor-backend mp``).

The lab engine computes in the API server's process; the core process only stands for vLLM's,
so that an operator (or a test) can kill it: the API server then logs vLLM's line, answers
/health 503 and shuts down with exit status 0, as vLLM does (vllm-project/vllm#48966): only
``Restart=always`` brings such an engine back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

NAME = "EngineCore_DP0"
# vLLM's line (v1/engine/core_client.py) when its core process is gone.
DIED = f"Engine core proc {NAME} died unexpectedly, shutting down client."
# Ends with its API server, as vLLM's core does (it watches its parent).
_CORE = (
    "import os, sys, time\n"
    "parent = int(sys.argv[1])\n"
    "while os.getppid() == parent:\n"
    "    time.sleep(0.5)\n"
)


class Core:
    """The core process; ``on_death()`` runs once when it ends while the server is up."""

    def __init__(self, on_death):
        self.stopping = False
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CORE, str(os.getpid()), NAME], stdin=subprocess.DEVNULL
        )
        watcher = threading.Thread(target=self._watch, args=(on_death,), daemon=True)
        watcher.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _watch(self, on_death) -> None:
        self.proc.wait()
        if not self.stopping:
            on_death()

    def stop(self) -> None:
        """The server shuts down: the core goes with it (no death reported)."""
        self.stopping = True
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
