# Module boundaries are the include path's, not a habit: nothing exports src/ as a whole. Each
# module stages links to its headers under build/modules/<NAME>/, at their paths in src/
# ("engine/chat/render_memo.h"):
#   public/  the headers other modules may include: every header of the folder, or only the
#            PUBLIC_HEADERS named;
#   all/     every header, for the module's own sources and tests.
# A target sees its own headers and the public headers of the modules it links (transitively
# through PUBLIC links), so an upward include (store including an engine header), an include of
# a module not linked, or a reach into a module's private headers fails to compile.
# tests/boundaries proves it.

# prefixd_stage_headers(NAME DIR [PUBLIC_HEADERS h...]): stages DIR's headers for module NAME;
# sets prefixd_<NAME>_public and prefixd_<NAME>_all to the two include roots.
function(prefixd_stage_headers name dir)
  cmake_parse_arguments(PARSE_ARGV 2 S "" "" "PUBLIC_HEADERS")
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR}/src ${dir})
  set(root ${PROJECT_BINARY_DIR}/modules/${name})
  file(REMOVE_RECURSE ${root})
  file(GLOB headers CONFIGURE_DEPENDS RELATIVE ${dir} ${dir}/*.h)
  foreach(h ${headers})
    file(MAKE_DIRECTORY ${root}/all/${rel})
    file(CREATE_LINK ${dir}/${h} ${root}/all/${rel}/${h} SYMBOLIC)
    if(NOT S_PUBLIC_HEADERS OR h IN_LIST S_PUBLIC_HEADERS)
      file(MAKE_DIRECTORY ${root}/public/${rel})
      file(CREATE_LINK ${dir}/${h} ${root}/public/${rel}/${h} SYMBOLIC)
    endif()
  endforeach()
  foreach(h ${S_PUBLIC_HEADERS})
    if(NOT h IN_LIST headers)
      message(FATAL_ERROR "module ${name}: public header ${h} is not in ${dir}")
    endif()
  endforeach()
  file(MAKE_DIRECTORY ${root}/public ${root}/all)
  set(prefixd_${name}_public ${root}/public PARENT_SCOPE)
  set(prefixd_${name}_all ${root}/all PARENT_SCOPE)
endfunction()

# prefixd_module(NAME DEPS... [PUBLIC_HEADERS h...]): a static library prefixd_<NAME> from the
# folder's *.cpp (tests excluded), linking DEPS publicly, and, when the folder holds
# *_test.cpp files, a GoogleTest binary prefixd_<NAME>_tests registered with CTest (label NAME).
function(prefixd_module name)
  cmake_parse_arguments(PARSE_ARGV 1 M "" "" "PUBLIC_HEADERS")
  set(deps ${M_UNPARSED_ARGUMENTS})
  prefixd_stage_headers(${name} ${CMAKE_CURRENT_SOURCE_DIR} PUBLIC_HEADERS ${M_PUBLIC_HEADERS})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  file(GLOB tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cpp)
  if(tests)
    list(REMOVE_ITEM srcs ${tests})
  endif()
  if(srcs)
    add_library(prefixd_${name} STATIC ${srcs})
    target_include_directories(prefixd_${name} PUBLIC ${prefixd_${name}_public}
                               PRIVATE ${prefixd_${name}_all})
    target_link_libraries(prefixd_${name} PUBLIC ${deps})
    target_compile_options(prefixd_${name} PRIVATE -Wall -Wextra)
  else()
    add_library(prefixd_${name} INTERFACE)
    target_include_directories(prefixd_${name} INTERFACE ${prefixd_${name}_public})
    target_link_libraries(prefixd_${name} INTERFACE ${deps})
  endif()
  if(tests)
    add_executable(prefixd_${name}_tests ${tests})
    target_include_directories(prefixd_${name}_tests PRIVATE ${prefixd_${name}_all})
    target_link_libraries(prefixd_${name}_tests PRIVATE prefixd_${name} GTest::gtest GTest::gtest_main)
    gtest_discover_tests(prefixd_${name}_tests
      WORKING_DIRECTORY ${PROJECT_BINARY_DIR}
      PROPERTIES LABELS ${name}
      DISCOVERY_TIMEOUT 60)
  endif()
endfunction()
