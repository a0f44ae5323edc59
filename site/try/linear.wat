(module
  (import "env" "memory" (memory 1))
  ;; y (n, dOut) = x (n, dIn) W^T + b, all float32 at byte addresses; dIn a multiple of 4.
  (func (export "linear")
    (param $x i32) (param $n i32) (param $dIn i32) (param $w i32) (param $b i32)
    (param $dOut i32) (param $y i32)
    (local $i i32) (local $o i32) (local $k i32) (local $row i32) (local $wRow i32)
    (local $bytes i32) (local $acc v128)
    (local.set $bytes (i32.shl (local.get $dIn) (i32.const 2)))
    (block $rowsDone
      (loop $rows
        (br_if $rowsDone (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $row (i32.add (local.get $x) (i32.mul (local.get $i) (local.get $bytes))))
        (local.set $o (i32.const 0))
        (local.set $wRow (local.get $w))
        (block $outsDone
          (loop $outs
            (br_if $outsDone (i32.ge_u (local.get $o) (local.get $dOut)))
            (local.set $acc (f32x4.splat (f32.const 0)))
            (local.set $k (i32.const 0))
            (loop $dots
              (local.set $acc
                (f32x4.add (local.get $acc)
                  (f32x4.mul (v128.load (i32.add (local.get $row) (local.get $k)))
                             (v128.load (i32.add (local.get $wRow) (local.get $k))))))
              (local.set $k (i32.add (local.get $k) (i32.const 16)))
              (br_if $dots (i32.lt_u (local.get $k) (local.get $bytes))))
            (f32.store (local.get $y)
              (f32.add
                (f32.add
                  (f32.add (f32x4.extract_lane 0 (local.get $acc)) (f32x4.extract_lane 1 (local.get $acc)))
                  (f32.add (f32x4.extract_lane 2 (local.get $acc)) (f32x4.extract_lane 3 (local.get $acc))))
                (f32.load (i32.add (local.get $b) (i32.shl (local.get $o) (i32.const 2))))))
            (local.set $y (i32.add (local.get $y) (i32.const 4)))
            (local.set $wRow (i32.add (local.get $wRow) (local.get $bytes)))
            (local.set $o (i32.add (local.get $o) (i32.const 1)))
            (br $outs)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $rows)))))
