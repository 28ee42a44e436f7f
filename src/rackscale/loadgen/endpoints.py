"""The adapters that send one sample to an inference endpoint over HTTP, and count what failed.

- ``openai``: an OpenAI-compatible completions endpoint, ``POST {url}`` with ``{model, prompt, max_tokens}``;
  a success is HTTP 200 with a JSON ``choices`` list whose first entry has a ``text``
  (https://platform.openai.com/docs/api-reference/completions; vLLM and SGLang serve the same shape).
- ``predict``: a plain JSON predict endpoint, ``POST {url}`` with ``{"inputs": [...]}``; a success is
  HTTP 200 with a JSON ``outputs`` list.

A failed request (a transport error, a timeout, a status other than 200, a body of the wrong shape) is
counted with its reason and raised as :class:`RequestFailed`; the SUT still completes the sample to
LoadGen (whose latency then includes the failure), so a run never hangs on it."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import httpx

from rackscale.model.errors import RackscaleError

MAX_SAMPLES_FILE = 64 * 1024 * 1024  # bytes of a --samples file
MAX_REASONS = 5  # distinct failure reasons kept for the report


class Api(StrEnum):
    OPENAI = "openai"
    PREDICT = "predict"


class RequestFailed(RackscaleError):
    """One request that did not give a usable answer; ``reason`` is short and has no payload in it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SampleError(RackscaleError, ValueError):
    """A --samples file that cannot be used (the message names the file and the fix)."""


class Endpoint(Protocol):
    def send(self, index: int) -> None:
        """Send sample ``index`` and wait for its answer; raise :class:`RequestFailed` if there is none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Failures:
    """What the tally holds at the end of a run."""

    sent: int
    failed: int
    reasons: tuple[tuple[str, int], ...]  # the most frequent first


class Tally:
    """Thread-safe counts of requests sent and failed: LoadGen's worker threads all write here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent = 0
        self._reasons: Counter[str] = Counter()

    def record(self, reason: str | None) -> None:
        with self._lock:
            self._sent += 1
            if reason is not None:
                self._reasons[reason] += 1

    def snapshot(self) -> Failures:
        with self._lock:
            return Failures(
                sent=self._sent,
                failed=sum(self._reasons.values()),
                reasons=tuple(self._reasons.most_common(MAX_REASONS)),
            )


def synthetic_samples(api: Api, count: int, *, input_size: int = 64) -> list[Any]:
    """``count`` deterministic samples: prompts for ``openai``, vectors of ``input_size`` numbers for
    ``predict`` (no randomness, so two runs send the same requests)."""
    if api is Api.OPENAI:
        return [f"Sample {i}: describe what a rack-scale GPU cluster is." for i in range(count)]
    return [[round(((i * 31 + j * 17) % 97) / 97, 4) for j in range(input_size)] for i in range(count)]


def load_samples(path: Path, api: Api) -> list[Any]:
    """A --samples file: a JSON list, of strings (prompts) for ``openai``, of JSON values (the ``inputs``
    of one request each) for ``predict``."""
    try:
        size = path.stat().st_size
        if size > MAX_SAMPLES_FILE:
            raise SampleError(f"{path}: {size:,} bytes is more than {MAX_SAMPLES_FILE:,}: give fewer samples")
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SampleError(f"{path}: file not found (--samples)") from None
    except UnicodeDecodeError as e:
        raise SampleError(f"{path}: not UTF-8 text (byte {e.start}); save it as UTF-8 JSON") from None
    except json.JSONDecodeError as e:
        raise SampleError(f"{path}:{e.lineno}: not JSON ({e.msg}); write a JSON list of samples") from None
    except OSError as e:
        raise SampleError(f"{path}: cannot read ({e.strerror or e})") from None
    if not isinstance(data, list) or not data:
        raise SampleError(f"{path}: must be a non-empty JSON list of samples")
    if api is Api.OPENAI:
        bad = next((i for i, s in enumerate(data) if not isinstance(s, str) or not s), None)
        if bad is not None:
            raise SampleError(f"{path}: sample {bad} must be a non-empty string (a prompt) with --api openai")
    return data


class HttpEndpoint:
    """One endpoint, one connection pool (``httpx.Client`` is thread-safe), a timeout per request."""

    def __init__(
        self,
        *,
        url: str,
        api: Api,
        samples: Sequence[Any],
        tally: Tally,
        model: str | None = None,
        max_tokens: int = 16,
        timeout_s: float = 30.0,
        connections: int = 32,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if api is Api.OPENAI and not model:
            raise ValueError("--model is needed with --api openai (the model the endpoint serves)")
        self.url, self.api, self.model, self.max_tokens = url, api, model, max_tokens
        self._samples, self._tally = list(samples), tally
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self._client = httpx.Client(timeout=timeout_s, limits=limits, transport=transport)

    def body(self, index: int) -> dict[str, Any]:
        sample = self._samples[index % len(self._samples)]
        if self.api is Api.OPENAI:
            return {"model": self.model, "prompt": sample, "max_tokens": self.max_tokens}
        return {"inputs": sample}

    def send(self, index: int) -> None:
        try:
            self.check(self._client.post(self.url, json=self.body(index)))
        except RequestFailed as e:
            self._tally.record(e.reason)
            raise
        except httpx.TimeoutException:
            self._tally.record("timeout")
            raise RequestFailed("timeout") from None
        except httpx.HTTPError as e:
            reason = f"{type(e).__name__}"
            self._tally.record(reason)
            raise RequestFailed(reason) from None
        self._tally.record(None)

    def check(self, response: httpx.Response) -> None:
        """Raise :class:`RequestFailed` unless ``response`` is a 200 with the API's answer in it."""
        if response.status_code != 200:
            raise RequestFailed(f"HTTP {response.status_code}")
        try:
            doc = response.json()
        except ValueError:
            raise RequestFailed("answer is not JSON") from None
        if self.api is Api.OPENAI:
            choices = doc.get("choices") if isinstance(doc, dict) else None
            if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
                raise RequestFailed("answer has no choices")
            if not isinstance(choices[0].get("text"), str):
                raise RequestFailed("answer's first choice has no text")
        elif not (isinstance(doc, dict) and isinstance(doc.get("outputs"), list)):
            raise RequestFailed("answer has no outputs list")

    def probe(self) -> str | None:
        """One request before the run, not counted: a reason the endpoint cannot be used at all (it is not
        there, or it refuses the request as malformed: 4xx), else None. A 5xx is left to the run, which
        counts it: a server that fails under load is what a load test is for."""
        try:
            response = self._client.post(self.url, json=self.body(0))
        except httpx.TimeoutException:
            return f"{self.url}: no answer within the timeout"
        except httpx.HTTPError as e:
            return f"{self.url}: cannot connect ({type(e).__name__}: {e})"
        if 400 <= response.status_code < 500:
            return f"{self.url}: HTTP {response.status_code} to a {self.api.value} request: check --endpoint, --api" + (
                " and --model" if self.api is Api.OPENAI else ""
            )
        if response.status_code == 200:
            try:
                self.check(response)
            except RequestFailed as e:
                return f"{self.url}: {e.reason} (is --api {self.api.value} right?)"
        return None

    def close(self) -> None:
        self._client.close()
