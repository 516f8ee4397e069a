# Every config users start from (configs/*.toml, shown in the README) runs as written, for a
# few steps, from a scratch directory (its relative output paths land there). A config that
# names a dataset of its own ([data], made by `meshtrain prepare` in about a minute, as its
# header says) is left out.
file(GLOB mt_configs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/configs/*.toml)
foreach(cfg ${mt_configs})
  get_filename_component(name ${cfg} NAME_WE)
  file(STRINGS ${cfg} own_data REGEX "^data *=")
  if(own_data)
    continue()
  endif()
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/configs_run/${name})
  add_test(NAME configs.${name}
           COMMAND sh -c "rm -rf '${dir}' && mkdir -p '${dir}/out/fortunes' '${dir}/out/${name}' && cd '${dir}' && exec '$<TARGET_FILE:meshtrain>' train --config '${cfg}' --steps 3 --eval-every 2 --eval-batches 1 --sample-tokens 16 --quiet")
  set_tests_properties(configs.${name} PROPERTIES LABELS binary TIMEOUT 300)
endforeach()
