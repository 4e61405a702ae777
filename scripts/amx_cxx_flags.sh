#!/usr/bin/env bash
# Prints the CMake flag that makes llama.cpp's AMX kernels run when built by GCC on an AMX CPU
# (-fno-dse: GCC 12's amxtileintrin.h lets dead-store elimination drop ggml's tile configuration;
# engine/llama/amx_check.py), and nothing elsewhere or where CMAKE_ARGS already sets the C++ flags.
# Used by .ci/run, scripts/build_llama_tools.sh and scripts/gpu_check.sh.
if grep -qw amx_int8 /proc/cpuinfo 2>/dev/null \
        && "${CXX:-c++}" --version 2>/dev/null | grep -q "Free Software Foundation" \
        && [[ "${CMAKE_ARGS:-}" != *CMAKE_CXX_FLAGS* ]]; then
    echo "-DCMAKE_CXX_FLAGS=-fno-dse"
fi
