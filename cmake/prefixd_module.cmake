# prefixd_module(NAME DEPS...): a static library from src/<NAME>/*.cpp (tests excluded) and, when
# the folder holds *_test.cpp files, a GoogleTest binary prefixd_<NAME>_tests registered with CTest.
function(prefixd_module name)
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  file(GLOB tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cpp)
  if(tests)
    list(REMOVE_ITEM srcs ${tests})
  endif()
  if(srcs)
    add_library(prefixd_${name} STATIC ${srcs})
    target_include_directories(prefixd_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(prefixd_${name} PUBLIC ${ARGN})
    target_compile_options(prefixd_${name} PRIVATE -Wall -Wextra)
  else()
    add_library(prefixd_${name} INTERFACE)
    target_include_directories(prefixd_${name} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(prefixd_${name} INTERFACE ${ARGN})
  endif()
  if(tests)
    add_executable(prefixd_${name}_tests ${tests})
    target_link_libraries(prefixd_${name}_tests PRIVATE prefixd_${name} GTest::gtest GTest::gtest_main)
    gtest_discover_tests(prefixd_${name}_tests
      WORKING_DIRECTORY ${PROJECT_BINARY_DIR}
      PROPERTIES LABELS ${name}
      DISCOVERY_TIMEOUT 60)
  endif()
endfunction()
