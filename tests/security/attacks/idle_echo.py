"""Not an attack: an idle extension. Prints READY, then echoes each stdin line."""

import sys

print("READY", flush=True)
for line in sys.stdin:
    print(f"echo: {line.strip()}", flush=True)
