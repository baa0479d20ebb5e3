// JavaScript tool module for the runner tests: fails to import.
throw new Error("this module is broken on purpose");
