# Compiles deprecated_names.cpp with CXX: the old names must compile and warn,
# each warning naming the new name; the control (new names only) must compile
# with no warning at all.
execute_process(COMMAND ${CXX} ${ARGS} -DDFLASH_CONTROL ${SRC} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0 OR err MATCHES "warning")
  message(FATAL_ERROR "the control (new names) must compile without warnings:\n${err}")
endif()
execute_process(COMMAND ${CXX} ${ARGS} ${SRC} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the old names must still compile:\n${err}")
endif()
foreach(want IN ITEMS "queue_spec<Name, Depth> is renamed dflash::queue_link<Name, Depth>"
                      "pipeline_keys_t<T> is renamed dflash::pipeline_keys<T<dflash::NullProfiler>>"
                      "pipeline_keys_of<B> is renamed dflash::pipeline_keys<B>"
                      "queue<I>\\(\\) is renamed Pipeline::link<I>\\(\\)"
                      "queue_count is renamed Pipeline::link_count"
                      "queue_type<I> is renamed Pipeline::link_type<I>"
                      "link_kind is renamed dflash::analysis::model_kind")
  if(NOT err MATCHES "${want}")
    message(FATAL_ERROR "no deprecation warning says '${want}':\n${err}")
  endif()
endforeach()
# Hidden: with DFLASH_NO_DEPRECATED every old name is an error, and the new names still build.
execute_process(COMMAND ${CXX} ${ARGS} -DDFLASH_NO_DEPRECATED -DDFLASH_CONTROL ${SRC} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR err MATCHES "warning")
  message(FATAL_ERROR "DFLASH_NO_DEPRECATED: the new names must compile without warnings:\n${err}")
endif()
execute_process(COMMAND ${CXX} ${ARGS} -DDFLASH_NO_DEPRECATED ${SRC} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "DFLASH_NO_DEPRECATED: the old names still compiled")
endif()
foreach(gone IN ITEMS "queue_spec" "pipeline_keys_t" "pipeline_keys_of" "queue_count" "queue_type" "link_kind")
  if(NOT err MATCHES "${gone}")
    message(FATAL_ERROR "DFLASH_NO_DEPRECATED: no error names '${gone}':\n${err}")
  endif()
endforeach()
message(STATUS "every old name warns with its new name, and none is there with DFLASH_NO_DEPRECATED")
