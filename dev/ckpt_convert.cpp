// dev/ckpt_convert.cpp: a checkpoint (llmc/run/checkpoint.h, either form, written at any layout by either trainer)
// turned into whole-model files, offline:
//   build/ckpt_convert CKPT_DIR --hf OUT.safetensors   the weights with Hugging Face names, as --save-safetensors
//                                                      writes them (llmc/run/weights_io.h)
//   build/ckpt_convert CKPT_DIR --single OUT_DIR       the single-file form, OUT_DIR/ckpt_<step>/: model.safetensors
//                                                      and optim.safetensors of whole tensors by parameter-table name,
//                                                      state.json, DONE; itself a checkpoint either trainer resumes
// It holds the whole model (weights, and for --single both moments) in host memory.
#include <cstdio>
#include <string>
#include <vector>
#include "llmc/run/checkpoint.h"
#include "llmc/run/weights_io.h"

int main(int argc, char** argv) {
    if (argc != 4 || (std::string(argv[2]) != "--hf" && std::string(argv[2]) != "--single")) {
        fprintf(stderr, "usage: %s CKPT_DIR --hf OUT.safetensors | --single OUT_DIR\n", argv[0]);
        return 1;
    }
    const std::string dir = argv[1], mode = argv[2], out = argv[3];
    note_path_flag("CKPT_DIR", dir);
    note_path_flag(mode.c_str(), out);
    checkpoint_check_dir(dir);
    if (mode == "--hf") check_output_file(out, "--hf");
    else check_output_dir(out, "--single");
    ModelConfig c = ckpt_config(dir);
    config_finalize(c, 1);
    const ParamTable t = build_param_table(c);
    TrainState s;
    Fp8State fp8;
    std::vector<float> p(t.total), m(mode == "--single" ? t.total : 0), v(m.size());
    checkpoint_load_whole(dir, c, t, p.data(), m.empty() ? nullptr : m.data(), v.empty() ? nullptr : v.data(), &s, &fp8);
    if (mode == "--hf") {
        hf_export(out, c, t, p.data());
        printf("wrote %s (%s, step %d)\n", out.c_str(), c.name.c_str(), s.step);
    } else {
        std::error_code ec;
        fs::create_directories(out, ec);
        if (ec) die("cannot create --single directory '%s': %s", out.c_str(), ec.message().c_str());
        checkpoint_save_single(out, c, t, p.data(), m.data(), v.data(), s, &fp8);
        printf("wrote %s/%s (%s, step %d)\n", out.c_str(), ckpt_dir_name(s.step).c_str(), c.name.c_str(), s.step);
    }
    return 0;
}
