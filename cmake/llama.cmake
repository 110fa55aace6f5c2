# Imports the pinned llama.cpp built by scripts/setup-llama.sh (shared libraries, cached by
# commit outside the repo). Defines prefixd::llama (llama + ggml), prefixd::llama_common and
# prefixd_mtmd (libmtmd).
if(NOT PREFIXD_LLAMA_BUILD)
  message(FATAL_ERROR "PREFIXD_LLAMA_BUILD is not set: run scripts/setup-llama.sh and pass its "
                      "output as -DPREFIXD_LLAMA_BUILD=<dir> (scripts/build.sh does this)")
endif()
get_filename_component(PREFIXD_LLAMA_SRC "${PREFIXD_LLAMA_BUILD}/../src" ABSOLUTE)
set(_llama_bin "${PREFIXD_LLAMA_BUILD}/bin")

function(_prefixd_import name file)
  if(NOT EXISTS "${file}")
    message(FATAL_ERROR "llama.cpp library missing: ${file}")
  endif()
  add_library(${name} UNKNOWN IMPORTED GLOBAL)
  set_target_properties(${name} PROPERTIES IMPORTED_LOCATION "${file}")
endfunction()

_prefixd_import(prefixd_llama_lib "${_llama_bin}/libllama.so")
_prefixd_import(prefixd_ggml_lib "${_llama_bin}/libggml.so")
_prefixd_import(prefixd_ggml_base_lib "${_llama_bin}/libggml-base.so")
# The CPU backend itself, for a test that runs one ggml op on it (flash_attn_tile_test.cpp).
_prefixd_import(prefixd_ggml_cpu_lib "${_llama_bin}/libggml-cpu.so")
file(GLOB _common_lib "${_llama_bin}/libllama-common.so" "${PREFIXD_LLAMA_BUILD}/common/libllama-common.so")
list(GET _common_lib 0 _common_lib)
_prefixd_import(prefixd_llama_common_lib "${_common_lib}")

add_library(prefixd_llama INTERFACE)
target_include_directories(prefixd_llama SYSTEM INTERFACE
  "${PREFIXD_LLAMA_SRC}/include" "${PREFIXD_LLAMA_SRC}/ggml/include")
target_link_libraries(prefixd_llama INTERFACE prefixd_llama_lib prefixd_ggml_lib prefixd_ggml_base_lib)

add_library(prefixd_llama_common INTERFACE)
target_include_directories(prefixd_llama_common SYSTEM INTERFACE
  "${PREFIXD_LLAMA_SRC}/common")
target_link_libraries(prefixd_llama_common INTERFACE prefixd_llama_common_lib prefixd_llama)

# libmtmd, the image encoder (tools/mtmd): loads a projector beside the text model (serve --mmproj)
# and the test projectors' tests run it.
_prefixd_import(prefixd_mtmd_lib "${_llama_bin}/libmtmd.so")
add_library(prefixd_mtmd INTERFACE)
target_include_directories(prefixd_mtmd SYSTEM INTERFACE "${PREFIXD_LLAMA_SRC}/tools/mtmd")
target_link_libraries(prefixd_mtmd INTERFACE prefixd_mtmd_lib prefixd_llama)

# The llama.cpp patch set the libraries were built with (setup-llama.sh's stamp): kernels differ
# from one set to another, so what a probe of them found is remembered per set (system_info.cpp).
set(_llama_stamp "${PREFIXD_LLAMA_BUILD}/.prefixd-built")
set(PREFIXD_LLAMA_PATCH_SET "unknown")
if(EXISTS "${_llama_stamp}")
  file(STRINGS "${_llama_stamp}" PREFIXD_LLAMA_PATCH_SET LIMIT_COUNT 1)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_llama_stamp}")
endif()

set(CMAKE_BUILD_RPATH "${_llama_bin};${PREFIXD_LLAMA_BUILD}/common")

# The pinned generator of tiny random models of every architecture llama.cpp supports (built by
# scripts/setup-llama.sh): the architecture sweep and the engine's model-limit tests use it.
set(PREFIXD_TEST_LLAMA_ARCHS "${_llama_bin}/test-llama-archs")
if(NOT EXISTS "${PREFIXD_TEST_LLAMA_ARCHS}")
  message(WARNING "${PREFIXD_TEST_LLAMA_ARCHS} is missing (run scripts/setup-llama.sh): the "
                  "model-limit tests skip and the architecture sweep is not registered")
endif()
