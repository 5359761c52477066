// Converts a glTF's PNG and JPEG textures to KTX2 (Basis Universal) with third-party tools,
// glTF-Transform and ktx2-encoder (the Basis Universal encoder built to WebAssembly), the way
// a game's pipeline prepares a level for KHR_texture_basisu: the extension required, no
// PNG / JPEG fallback, mip levels included. Colour textures become sRGB-tagged ETC1S (or
// UASTC with `uastc`); normal, metallic-roughness and occlusion maps linear UASTC.
// Usage: node basisu-gltf.mjs IN.gltf|IN.glb OUT.glb etc1s|uastc  (run by assets/fetch-data.sh)
import { NodeIO } from '@gltf-transform/core';
import { ALL_EXTENSIONS } from '@gltf-transform/extensions';
import { ktx2 } from 'ktx2-encoder/gltf-transform';
import { PNG } from 'pngjs';
import jpeg from 'jpeg-js';

const [, , input, output, mode] = process.argv;
const io = new NodeIO().registerExtensions(ALL_EXTENSIONS);
const doc = await io.read(input);
const imageDecoder = async (bytes) => {
  const buf = Buffer.from(bytes);
  const img = buf[0] === 0x89 ? PNG.sync.read(buf) : jpeg.decode(buf, { useTArray: true, formatAsRGBA: true });
  return { data: new Uint8Array(img.data), width: img.width, height: img.height };
};
const data = /normalTexture|metallicRoughnessTexture|occlusionTexture/;
await doc.transform(
  ktx2({ slots: data, isUASTC: true, isInputSRGB: false, isSetKTX2SRGBTransferFunc: false, generateMipmap: true, imageDecoder }),
);
await doc.transform(
  ktx2({ isUASTC: mode === 'uastc', isInputSRGB: true, isSetKTX2SRGBTransferFunc: true, generateMipmap: true, imageDecoder }),
);
await io.write(output, doc);
