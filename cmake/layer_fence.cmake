# The layer fence. Headers are included by their path under src/ ("core/log.h"), but no
# library gets src/ itself as an include path: each one exports an include root of its own
# (in the build tree) that holds a single link, <root>/<folder> -> src/<folder>. A library
# sees its own folder and, through the libraries it links, the roots of its lower layers and
# nothing else, so an include that points up the stack (server -> engine -> model -> kv,
# kernels, loader, dist -> core) is a "No such file" error at build time. tests/fence proves it.
function(di_layer_headers target folder)
  set(root ${PROJECT_BINARY_DIR}/layer_include/${folder})
  file(MAKE_DIRECTORY ${root})
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${folder} ${root}/${folder} SYMBOLIC)
  target_include_directories(${target} PUBLIC ${root})
endfunction()
