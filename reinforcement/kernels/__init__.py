"""C++ kernels of the reinforcement kit (built from kernels/src/*.cpp)."""
