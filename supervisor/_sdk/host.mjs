// host.mjs: `node host.mjs` runs corral's Node tool-host runner, host.cjs (see there).
// corral itself starts host.cjs: an ES module entry costs Node the start of its ES
// module loader, which a CommonJS one does not.
import "./host.cjs";
