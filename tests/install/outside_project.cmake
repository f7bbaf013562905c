# CTest script: installs the build in BUILD_DIR to a scratch prefix, checks that
# the exported package carries neither the tool's nor the tests' dependencies,
# then configures, builds and runs examples/ as an outside project that only
# knows find_package(sparkdraft). Any failure stops with a message naming the step.
set(work ${BUILD_DIR}/install-test)
set(prefix ${work}/prefix)
file(REMOVE_RECURSE ${work})

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

file(GLOB_RECURSE exported ${prefix}/*/cmake/sparkdraft/*.cmake)
if(NOT exported)
  message(FATAL_ERROR "install test: no exported CMake package under ${prefix}")
endif()
foreach(f ${exported})
  file(READ ${f} text)
  foreach(dep CLI11 GTest gtest)
    string(FIND "${text}" "${dep}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "install test: the exported package (${f}) mentions ${dep}")
    endif()
  endforeach()
endforeach()
if(NOT EXISTS ${prefix}/include/sparkdraft/draft.h OR NOT EXISTS ${prefix}/include/sparkdraft/version.h)
  message(FATAL_ERROR "install test: public headers missing under ${prefix}/include/sparkdraft")
endif()

set(flags "")
if(SANITIZE)
  set(flags "-fsanitize=address,undefined")
endif()
step("configuring examples/ against the installed package"
     ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples -B ${work}/build -G ${GENERATOR}
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release
     "-DCMAKE_CXX_FLAGS=${flags}" "-DCMAKE_EXE_LINKER_FLAGS=${flags}")
step("building examples/" ${CMAKE_COMMAND} --build ${work}/build)
step("running the example" ${work}/build/draft_example)
string(REGEX MATCHALL "draft:( [0-9]+)+" drafts "${step_output}")
list(LENGTH drafts n)
if(n LESS 1)
  message(FATAL_ERROR "install test: the example printed no draft tokens:\n${step_output}")
endif()
message(STATUS "install test: the outside project built and drafted:\n${step_output}")
file(REMOVE_RECURSE ${work})
