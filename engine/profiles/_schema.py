"""Engine profiles: parsed and validated from TOML.

A profile is data only; :mod:`engine.profiles._render` turns it into the exact
argument list and environment of one launch.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.errors import ProfileError

ProfileKind = Literal["vllm", "endpoint"]
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
REASONING_EFFORTS: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
BUILTIN_MODELS: tuple[str, ...] = ("smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct",
                                    "qwen2.5-coder-1.5b-instruct")
PLUGIN_FEATURES: tuple[str, ...] = ("scheduler_fix", "w2_quant", "fp4_pool", "calib_capture",
                                     "p12_packed")


@dataclass(frozen=True)
class SpeculativeSpec:
    """``--speculative-config`` for a drafter."""

    method: str
    model: str | None
    num_speculative_tokens: int
    draft_block_size: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentDefaults:
    """Per-profile defaults for the agent's requests."""

    reasoning_effort: str = "low"
    thinking_token_budget: int = 1536
    temperature: float | None = None
    """Sampling temperature sent with every request; None: the server's default."""
    top_p: float | None = None
    thinking_history: bool = False
    """Send each assistant message's reasoning back within a turn's tool loop (in
    ``reasoning_content``), as models trained on interleaved thinking expect."""
    structured_tools: bool = False
    """Small-model mode: each reply is one JSON step (a tool call or the answer),
    held to the tools' schemas by vLLM's structured outputs."""
    step_name_key: str = "tool"
    """Small-model mode: ``tool`` or ``name`` (the hermes shape Qwen knows) names
    the tool in a call step."""
    first_step_tool: bool = False
    """A turn's first request must call a tool (small-model mode: no answer in its
    schema; otherwise ``tool_choice: "required"``)."""
    tools: tuple[str, ...] = ()
    """The built-in tools offered to the model; empty: all of them."""
    task_reminder: bool = False
    """Append the turn's task to every tool result (a small model loses it)."""
    workspace_files: bool = False
    """List the workspace's files in the system prompt (a small model guesses paths)."""
    task_tool: bool = True
    """Offer the ``task`` tool (a read-only explore sub-conversation that returns a
    summary); the small-model profiles turn it off."""


@dataclass(frozen=True)
class Profile:
    """One engine configuration, as written in its TOML file."""

    name: str
    kind: ProfileKind
    description: str
    source: Path
    # vllm profiles
    model_path: str | None = None
    model_builtin: str | None = None
    served_name: str | None = None
    quantization: str | None = None
    vision: bool = False
    """The model takes images (``[model] vision``, or ``[endpoint] vision``): the
    agent sends image attachments only then, and refuses them by name otherwise."""
    port: int = 8400
    host: str = "127.0.0.1"
    max_model_len: int | None = None
    dtype: str | None = None
    enforce_eager: bool = False
    enable_prefix_caching: bool | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = False
    reasoning_config: dict[str, Any] | None = None
    model_runner_v2: bool = False
    gpu_memory_utilization: float | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    speculative: SpeculativeSpec | None = None
    plugin_enabled: bool = False
    plugin_features: tuple[str, ...] = ()
    cpu_kvcache_space_gib: int | None = None
    cpu_bind_all_cores: bool = False
    memory_need_gib: float | None = None
    # endpoint profiles
    base_url: str | None = None
    endpoint_model: str | None = None
    api_key_env: str | None = None
    agent: AgentDefaults = field(default_factory=AgentDefaults)


_SECTIONS: dict[str, set[str]] = {
    "profile": {"name", "kind", "description"},
    "model": {"path", "builtin", "served_name", "quantization", "vision"},
    "server": {
        "port", "host", "max_model_len", "dtype", "enforce_eager", "enable_prefix_caching",
        "reasoning_parser", "tool_call_parser", "enable_auto_tool_choice", "reasoning_config",
        "model_runner_v2", "gpu_memory_utilization", "extra_args",
    },
    "env": set(),
    "speculative": {"method", "model", "num_speculative_tokens", "draft_block_size"},
    "plugin": {"enabled", "features"},
    "cpu": {"kvcache_space_gib", "bind_all_cores"},
    "memory": {"need_gib"},
    "endpoint": {"base_url", "model", "api_key_env", "vision"},
    "agent": {"reasoning_effort", "thinking_token_budget", "temperature", "top_p",
              "thinking_history", "structured_tools", "step_name_key", "first_step_tool",
              "tools", "task_reminder", "workspace_files", "task_tool"},
}


class _Reader:
    """Typed access to one TOML table with errors that name file and key."""

    def __init__(self, source: Path, section: str, table: dict[str, Any]) -> None:
        self.source = source
        self.section = section
        self.table = table

    def _fail(self, key: str, why: str) -> ProfileError:
        return ProfileError(f"{self.source}: [{self.section}] {key}: {why}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        if key not in self.table:
            return default
        value = self.table[key]
        # bool is an int subclass; never accept it where a number is expected.
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            raise self._fail(key, f"expected {_kind_name(kind)}, got a boolean")
        if not isinstance(value, kind):
            raise self._fail(key, f"expected {_kind_name(kind)}, got {type(value).__name__}")
        return value

    def positive_int(self, key: str, default: int | None = None) -> int | None:
        value = self.get(key, int, default)
        if value is not None and value <= 0:
            raise self._fail(key, f"must be positive, got {value}")
        return value  # type: ignore[no-any-return]

    def str_list(self, key: str) -> tuple[str, ...]:
        value = self.get(key, list, [])
        if not all(isinstance(v, str) for v in value):
            raise self._fail(key, "expected a list of strings")
        return tuple(value)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
             list: "a list", dict: "a table"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def parse_profile(text: str, source: Path) -> Profile:
    """Parse and validate one profile's TOML text."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{source}: malformed TOML: {exc}") from None
    for section, value in doc.items():
        if section not in _SECTIONS:
            known = ", ".join(sorted(_SECTIONS))
            raise ProfileError(f"{source}: unknown section [{section}] (known: {known})")
        if not isinstance(value, dict):
            raise ProfileError(f"{source}: {section} must be a table")
        allowed = _SECTIONS[section]
        if allowed:
            for key in value:
                if key not in allowed:
                    raise ProfileError(
                        f"{source}: [{section}] unknown key {key!r} "
                        f"(known: {', '.join(sorted(allowed))})"
                    )

    def table(name: str) -> _Reader:
        return _Reader(source, name, doc.get(name, {}))

    meta = table("profile")
    name = meta.get("name", str)
    if not name:
        raise ProfileError(f"{source}: [profile] name is required")
    kind = meta.get("kind", str, "vllm")
    if kind not in ("vllm", "endpoint"):
        raise ProfileError(f"{source}: [profile] kind must be 'vllm' or 'endpoint', got {kind!r}")

    agent_t = table("agent")
    effort = agent_t.get("reasoning_effort", str, "low")
    if effort not in REASONING_EFFORTS:
        raise ProfileError(
            f"{source}: [agent] reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}"
        )
    budget = agent_t.get("thinking_token_budget", int, 1536)
    if budget < -1:
        raise ProfileError(
            f"{source}: [agent] thinking_token_budget must be >= -1 (-1 = unlimited)"
        )
    temperature = agent_t.get("temperature", (int, float))
    if temperature is not None and not 0 <= temperature <= 2:
        raise ProfileError(f"{source}: [agent] temperature must be between 0 and 2")
    top_p = agent_t.get("top_p", (int, float))
    if top_p is not None and not 0 < top_p <= 1:
        raise ProfileError(f"{source}: [agent] top_p must be in (0, 1]")
    name_key = agent_t.get("step_name_key", str, "tool")
    if name_key not in ("tool", "name"):
        raise ProfileError(f"{source}: [agent] step_name_key must be 'tool' or 'name', "
                           f"got {name_key!r}")
    agent = AgentDefaults(
        reasoning_effort=effort, thinking_token_budget=budget,
        temperature=float(temperature) if temperature is not None else None,
        top_p=float(top_p) if top_p is not None else None,
        thinking_history=bool(agent_t.get("thinking_history", bool, False)),
        structured_tools=agent_t.get("structured_tools", bool, False),
        step_name_key=name_key,
        first_step_tool=agent_t.get("first_step_tool", bool, False),
        tools=agent_t.str_list("tools"),
        task_reminder=agent_t.get("task_reminder", bool, False),
        workspace_files=agent_t.get("workspace_files", bool, False),
        task_tool=agent_t.get("task_tool", bool, True),
    )
    description = meta.get("description", str, "")

    if kind == "endpoint":
        ep = table("endpoint")
        base_url = ep.get("base_url", str)
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise ProfileError(f"{source}: [endpoint] base_url must be an http(s) URL")
        key_env = ep.get("api_key_env", str)
        if key_env is not None and not key_env.replace("_", "").isalnum():
            raise ProfileError(
                f"{source}: [endpoint] api_key_env must name an environment variable, "
                "not hold a key"
            )
        return Profile(
            name=name, kind="endpoint", description=description, source=source,
            base_url=base_url.rstrip("/"), endpoint_model=ep.get("model", str) or None,
            api_key_env=key_env, vision=ep.get("vision", bool, False), agent=agent,
        )

    model = table("model")
    path = model.get("path", str)
    builtin = model.get("builtin", str)
    if (path is None) == (builtin is None):
        raise ProfileError(f"{source}: [model] needs exactly one of 'path' or 'builtin'")
    if builtin is not None and builtin not in BUILTIN_MODELS:
        raise ProfileError(
            f"{source}: [model] builtin {builtin!r} is unknown (known: {', '.join(BUILTIN_MODELS)})"
        )

    server = table("server")
    port = server.positive_int("port", 8400)
    assert port is not None
    if port > 65535:
        raise ProfileError(f"{source}: [server] port must be at most 65535, got {port}")
    rc = server.get("reasoning_config", dict)
    gmu = server.get("gpu_memory_utilization", (float, int))
    if gmu is not None and not 0 < gmu <= 1:
        raise ProfileError(f"{source}: [server] gpu_memory_utilization must be in (0, 1]")
    auto_tool = server.get("enable_auto_tool_choice", bool, False)
    tool_parser = server.get("tool_call_parser", str)
    if auto_tool and not tool_parser:
        raise ProfileError(
            f"{source}: [server] enable_auto_tool_choice needs tool_call_parser (vLLM requires it)"
        )

    env_t = doc.get("env", {})
    env: dict[str, str] = {}
    for key, value in env_t.items():
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ProfileError(f"{source}: [env] {key}: values must be strings or numbers")
        env[key] = str(value)

    speculative = _parse_speculative(source, doc.get("speculative"))

    plugin = table("plugin")
    features = plugin.str_list("features")
    for feat in features:
        if feat not in PLUGIN_FEATURES:
            raise ProfileError(
                f"{source}: [plugin] unknown feature {feat!r} (known: {', '.join(PLUGIN_FEATURES)})"
            )
    cpu = table("cpu")
    need = table("memory").get("need_gib", (int, float))
    if need is not None and need <= 0:
        raise ProfileError(f"{source}: [memory] need_gib must be positive")

    return Profile(
        name=name, kind="vllm", description=description, source=source,
        model_path=path, model_builtin=builtin,
        served_name=model.get("served_name", str), quantization=model.get("quantization", str),
        vision=model.get("vision", bool, False), port=port,
        host=server.get("host", str, "127.0.0.1"),
        max_model_len=server.positive_int("max_model_len"), dtype=server.get("dtype", str),
        enforce_eager=server.get("enforce_eager", bool, False),
        enable_prefix_caching=server.get("enable_prefix_caching", bool),
        reasoning_parser=server.get("reasoning_parser", str),
        tool_call_parser=tool_parser, enable_auto_tool_choice=auto_tool,
        reasoning_config=rc, model_runner_v2=server.get("model_runner_v2", bool, False),
        gpu_memory_utilization=float(gmu) if gmu is not None else None,
        extra_args=server.str_list("extra_args"), env=env, speculative=speculative,
        plugin_enabled=plugin.get("enabled", bool, False), plugin_features=features,
        cpu_kvcache_space_gib=cpu.positive_int("kvcache_space_gib"),
        cpu_bind_all_cores=cpu.get("bind_all_cores", bool, False),
        memory_need_gib=float(need) if need is not None else None, agent=agent,
    )


def _parse_speculative(source: Path, raw: Any) -> SpeculativeSpec | None:
    if raw is None:
        return None
    spec = _Reader(source, "speculative", raw)
    method = spec.get("method", str)
    if not method:
        raise ProfileError(f"{source}: [speculative] method is required")
    k = spec.positive_int("num_speculative_tokens")
    if k is None:
        raise ProfileError(f"{source}: [speculative] num_speculative_tokens is required")
    block = spec.positive_int("draft_block_size")
    if method == "dflash":
        block = block or 8
        # A DFlash drafter predicts one block per step; the first slot is the
        # verified token, so at most block - 1 tokens can be speculated.
        if k > block - 1:
            raise ProfileError(
                f"{source}: [speculative] num_speculative_tokens={k} exceeds the DFlash "
                f"drafter's block of {block} (at most {block - 1})"
            )
        if not spec.get("model", str):
            raise ProfileError(f"{source}: [speculative] dflash needs the drafter 'model' path")
    return SpeculativeSpec(
        method=method, model=spec.get("model", str), num_speculative_tokens=k,
        draft_block_size=block,
    )


def load_profile_file(path: Path) -> Profile:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"cannot read profile {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: not UTF-8 text") from None
    return parse_profile(text, path)
