"""The LLM a workload or a what-if names: a built-in model (``deepseek-r1``) or a Hugging Face ``config.json``
file, read here (the performance model, :mod:`rackscale.llm`, is pure and reads no file).

Shared by ``rackscale perf`` and ``compare-arch`` (which word a bad value as their option) and by
``rackscale sweep``'s ``perf serve`` cells (which word it as the document's field): a problem is one
:class:`ModelFileError`, whose ``detail`` says what is wrong and ``in_file`` whether it is about a file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rackscale.model.errors import RackscaleError

if TYPE_CHECKING:
    from rackscale.llm.decode import Mtp
    from rackscale.llm.models import ModelSpec

MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KB; a bigger file is not one
MTP_BUILTINS = frozenset({"deepseek-v3", "deepseek-r1"})  # built-ins that ship a multi-token-prediction head


class ModelFileError(RackscaleError, ValueError):
    """A model that cannot be loaded: ``detail`` says why; ``in_file``: the text named a file."""

    def __init__(self, detail: str, *, in_file: bool) -> None:
        self.detail, self.in_file = detail, in_file
        super().__init__(detail)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (self.detail, self.in_file))


def _rebuild(detail: str, in_file: bool) -> ModelFileError:
    return ModelFileError(detail, in_file=in_file)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedModel:
    spec: ModelSpec
    has_mtp_head: bool  # DeepSeek-V3/R1 (num_nextn_predict_layers >= 1): MTP may use it
    origin: str  # "built-in" or the file it was read from


def names_a_file(text: str) -> bool:
    """A path to an existing file or a text ending in ``.json`` (so that a mistyped path says "cannot
    read", not "unknown model")."""
    if text.lower().endswith(".json"):
        return True
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # a name the OS cannot take (longer than NAME_MAX, an embedded NUL): no file
        return False


def _is_dir(text: str) -> bool:
    try:
        return Path(text).is_dir()
    except (OSError, ValueError):  # a name the OS cannot take (too long, an embedded NUL): not a folder
        return False


def load_model(text: str) -> LoadedModel:
    """A built-in name, or a Hugging Face ``config.json`` (see :func:`names_a_file`)."""
    from rackscale.llm.hf_config import model_from_hf_config
    from rackscale.llm.models import model_named

    if names_a_file(text):
        path = Path(text)
        try:
            with path.open("rb") as fh:
                raw = fh.read(MAX_CONFIG_BYTES + 1)
        except (OSError, ValueError) as err:  # ValueError: a path the OS cannot take (an embedded NUL)
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            raise ModelFileError(f"cannot read the file ({why})", in_file=True) from None
        if len(raw) > MAX_CONFIG_BYTES:
            raise ModelFileError(f"more than {MAX_CONFIG_BYTES >> 10} KiB; a config.json is a few KB", in_file=True)
        try:
            config = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ModelFileError(f"not valid JSON ({err})", in_file=True) from None
        except ValueError:  # an integer past Python's 4,300 digits, whose message says to raise a Python limit
            raise ModelFileError(
                "not a config.json: it holds a number thousands of digits long", in_file=True
            ) from None
        except RecursionError:  # thousands of nested brackets: no config.json is built like that
            raise ModelFileError("JSON nested too deeply to be a config.json", in_file=True) from None
        if not isinstance(config, dict):
            raise ModelFileError(
                f"a config.json holds one JSON object (got {type(config).__name__})", in_file=True
            ) from None
        name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
        try:
            spec = model_from_hf_config(config, name=name or "model")
        except RackscaleError as err:
            raise ModelFileError(str(err), in_file=True) from None
        return LoadedModel(spec=spec, has_mtp_head=_mtp_layers(config) > 0, origin=str(path))
    try:
        spec = model_named(text)
    except RackscaleError as err:
        if _is_dir(text):  # a Hugging Face checkpoint's folder, where its config.json was meant
            where = Path(text) / "config.json"
            raise ModelFileError(f"a folder, not a config.json: give the file ({where})", in_file=True) from None
        raise ModelFileError(str(err), in_file=False) from None
    return LoadedModel(spec=spec, has_mtp_head=text.strip().lower() in MTP_BUILTINS, origin="built-in")


def _mtp_layers(config: Mapping[str, object]) -> int:
    """``num_nextn_predict_layers`` of a DeepSeek config (or of its ``text_config``); 0 when absent or junk."""
    for source in (config, config.get("text_config")):
        if isinstance(source, Mapping):
            value = source.get("num_nextn_predict_layers")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return 0


def model_mtp(model: LoadedModel, wanted: bool) -> Mtp:
    """DeepSeek's MTP head (one draft token, accepted 85 %) when asked for; a model without a head cannot."""
    from rackscale.llm.decode import DEEPSEEK_MTP, NO_MTP

    if not wanted:
        return NO_MTP
    if not model.has_mtp_head:
        raise ModelFileError(f"the model has no MTP head ({model.spec.name}; DeepSeek-V3/R1 have one)", in_file=False)
    return DEEPSEEK_MTP
