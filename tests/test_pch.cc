// Compiles tests/CMakeLists.txt's precompiled header once; the tests reuse it.
