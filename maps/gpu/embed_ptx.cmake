# Writes a C++ source that holds a text file as a raw string literal:
#   cmake -DINPUT=in.ptx -DOUTPUT=out.cc -DFUNCTION=HelpersPtx -P embed_ptx.cmake
# (Build-time step of maps/gpu/CMakeLists.txt.)
file(READ "${INPUT}" text)
string(FIND "${text}" ")cuprobe_ptx\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )cuprobe_ptx\"")
endif()
string(LENGTH "${text}" length)
if(length EQUAL 0)
  message(FATAL_ERROR "${INPUT} is empty")
endif()
# Raw string literals are limited in length by some compilers; split the text
# into chunks of at most 16 KiB that the compiler concatenates.
set(body "")
set(pos 0)
while(pos LESS length)
  string(SUBSTRING "${text}" ${pos} 16384 chunk)
  string(APPEND body "R\"cuprobe_ptx(${chunk})cuprobe_ptx\"\n")
  math(EXPR pos "${pos} + 16384")
endwhile()
file(WRITE "${OUTPUT}.tmp"
"// Generated from ${INPUT} by maps/gpu/embed_ptx.cmake. Do not edit.
#include <string_view>

#include \"maps/gpu/helpers_ptx.h\"

namespace cuprobe {
namespace {
constexpr char kText[] =
${body};
}  // namespace

std::string_view ${FUNCTION}() { return std::string_view(kText, sizeof(kText) - 1); }

}  // namespace cuprobe
")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
