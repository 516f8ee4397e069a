#include "cli/cli.h"

int main(int argc, char** argv) { return mt::cli_main(argc, argv); }
