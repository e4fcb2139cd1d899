#!/usr/bin/env bash
# Sourced by prebuild.sh (here) and env.sh (on the GPU machine): tree_stamp prints a hash of the files the binaries
# are compiled from (sources, headers, CMake files under src/, tests/, bench/ and the top CMakeLists.txt), the same
# on both machines for the same tree.
tree_stamp() {
  find src tests bench CMakeLists.txt -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
    -o -name 'CMakeLists.txt' -o -name '*.cmake' \) | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16
}
