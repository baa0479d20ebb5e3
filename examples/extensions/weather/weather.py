#!/usr/bin/env python3
"""weather: an LLM-callable tool and a slash command, written with the corral_ext SDK.

The tool ``weather(city)`` returns a deterministic fake: the SHA-1 of the lower-cased
city name picks a temperature (-5..24 °C) and a condition, so the same city always
reports the same weather ("Berlin: 16°C, fog") and the demo needs no network.
The command ``/weather <city>`` asks the agent for the weather in one line.
"""

from __future__ import annotations

import hashlib
from typing import Any

from corral_ext import Extension, Response, ToolResult, error_result, prompt, text_result

CONDITIONS = ("sunny", "cloudy", "drizzle", "rain", "thunderstorm", "fog", "snow", "windy")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name to look up the weather for."}
    },
    "required": ["city"],
}

ext = Extension("weather", "1.0.0")


def fake_weather(city: str) -> str:
    """Stable fake weather for ``city``: same input, same answer, no API calls."""
    digest = hashlib.sha1(city.lower().encode("utf-8")).digest()
    temperature = digest[0] % 30 - 5
    condition = CONDITIONS[digest[1] % len(CONDITIONS)]
    return f"{city}: {temperature}°C, {condition}"


@ext.tool("weather", "Get the current weather for a city.", SCHEMA)
def weather_tool(args: dict[str, Any]) -> ToolResult:
    """The model-callable tool: ``{"city": "Berlin"}`` -> ``Berlin: 16°C, fog``."""
    city = args.get("city")
    if not isinstance(city, str) or not city.strip():
        return error_result("city is required (a non-empty string)")
    return text_result(fake_weather(city.strip()))


@ext.command("weather", "current weather for a city")
def weather_command(args: str) -> Response:
    """``/weather Berlin``: let the agent answer (and call the tool) in one line."""
    return prompt(f"Show today's weather for {args} in one line.")


if __name__ == "__main__":
    ext.run()
