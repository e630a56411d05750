# What a wheel carries besides the Python files and _core: the bundled scenarios (moenum/scenarios,
# so `moenum run smoke` works by name from anywhere) and the commit it was built from
# (moenum/_build_info.py, read by moenum.provenance.git_sha).
#
# An editable install reads both from the source checkout instead (scenarios/ at the repository root,
# `git rev-parse HEAD`), so they are installed only into real wheels: a copy in site-packages would
# go stale as the checkout moves on.
if(SKBUILD_STATE STREQUAL "editable")
  return()
endif()

install(DIRECTORY scenarios/ DESTINATION moenum/scenarios FILES_MATCHING PATTERN "*.yaml")

# The commit of moenum's own source: only when the source folder is the top of a git checkout (an
# sdist unpacked inside some other repository must not take that repository's commit).
set(MOENUM_GIT_SHA "")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${CMAKE_CURRENT_SOURCE_DIR}" rev-parse --show-toplevel
                  OUTPUT_VARIABLE _moenum_git_top OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                  RESULT_VARIABLE _moenum_git_rc)
  if(_moenum_git_rc EQUAL 0)
    file(REAL_PATH "${_moenum_git_top}" _moenum_git_top)
    file(REAL_PATH "${CMAKE_CURRENT_SOURCE_DIR}" _moenum_src)
    if(_moenum_git_top STREQUAL _moenum_src)
      execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${CMAKE_CURRENT_SOURCE_DIR}" rev-parse HEAD
                      OUTPUT_VARIABLE MOENUM_GIT_SHA OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    endif()
  endif()
endif()
file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/_build_info.py"
     "\"\"\"Written by the build (cmake/package_data.cmake).\"\"\"\nGIT_SHA = \"${MOENUM_GIT_SHA}\"\n")
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/_build_info.py" DESTINATION moenum)
