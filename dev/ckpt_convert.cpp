// dev/ckpt_convert.cpp: a checkpoint (llmc/run/checkpoint.h, either form, written at any layout by either trainer)
// turned into whole-model files, offline:
//   build/ckpt_convert CKPT_DIR --hf OUT.safetensors   the weights with Hugging Face names, as --save-safetensors
//                                                      writes them (llmc/run/weights_io.h), one tensor at a time
//   build/ckpt_convert CKPT_DIR --single OUT_DIR       the single-file form, OUT_DIR/ckpt_<step>/: model.safetensors
//                                                      and optim.safetensors of whole tensors by parameter-table name,
//                                                      state.json, DONE; itself a checkpoint either trainer resumes
// --hf holds one tensor at a time in host memory; --single the whole model and both moments.
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
    if (mode == "--hf") {
        CkptReader R;
        ckpt_open(&R, dir, c, t, &s);
        hf_export_stream(out, c, t, [&](size_t k, float* dst) {
            const ParamSpec& p = t.specs[k];
            ckpt_read(&R, "p", p.name, {{0, p.rows, 0, p.cols}}, 0, (int64_t)p.numel(), dst);
        });
        ckpt_close(&R);
        printf("wrote %s (%s, step %d)\n", out.c_str(), c.name.c_str(), s.step);
    } else {
        std::vector<float> p(t.total), m(t.total), v(t.total);
        checkpoint_load_whole(dir, c, t, p.data(), m.data(), v.data(), &s, &fp8);
        std::error_code ec;
        fs::create_directories(out, ec);
        if (ec) die("cannot create --single directory '%s': %s", out.c_str(), ec.message().c_str());
        checkpoint_save_single(out, c, t, p.data(), m.data(), v.data(), s, &fp8);
        printf("wrote %s/%s (%s, step %d)\n", out.c_str(), ckpt_dir_name(s.step).c_str(), c.name.c_str(), s.step);
    }
    return 0;
}
