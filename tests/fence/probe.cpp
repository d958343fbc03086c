// One header, compiled as a source of the library the probe target links (tests/fence/CMakeLists.txt):
// it sees exactly the include roots that library's own sources see.
#include FENCE_PROBE_HEADER
