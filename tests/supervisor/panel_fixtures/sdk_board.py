"""The board again, written with corral's Python SDK (corral_ext's panel API)."""

from corral_ext import Extension, open_panel, text_result

ext = Extension("sdk-board", "0.1.0")
items = ["first"]
seen = []


def lines():
    return [f"- {item}" for item in items] + ["keys: " + " ".join(seen)]


@ext.command("board", "open the board panel")
def board(args: str):
    return open_panel("sdk-board", "SDK board", lines(), "q closes")


def on_key(key: str, text: str) -> None:
    if key == "rune" and text == "q":
        ext.close_panel("sdk-board")
        return
    seen.append(text if key == "rune" else key)
    ext.render_panel("sdk-board", "", lines(), "q closes")


def on_close(reason: str) -> None:
    ext.notify(f"sdk-board closed: {reason}")


ext.on_panel("sdk-board", on_key, on_close)


SCHEMA = {"type": "object", "properties": {"item": {"type": "string"}}}


@ext.tool("board_add", "add an item", SCHEMA)
def add(args: dict):
    items.append(args.get("item", "?"))
    ext.render_panel("sdk-board", "", lines(), "q closes")
    return text_result("added")


ext.run()
